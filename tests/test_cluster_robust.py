"""Task instances as the unit: CR2 (Bell & McCaffrey 2002) against an independent dense
implementation and statsmodels' HC2, and coverage simulations with a task x version interaction.

Simulations are small by default (a few seconds); STEPLOG_HEAVY_DRILLS=1 runs 10x more.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.linalg
import statsmodels.api as sm
from scipy.special import expit

from steplog.stats import clustered
from steplog.stats.cluster_robust import clustered_difference, clustered_mean, cr2_coefficients

REPS = 20000 if os.environ.get("STEPLOG_HEAVY_DRILLS") == "1" else 2000


def _dense_cr2(x: np.ndarray, y: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """CR2 straight from the published formula, with n_g x n_g matrix square roots."""
    bread = np.linalg.inv(x.T @ x)
    resid = y - x @ (bread @ x.T @ y)
    meat = np.zeros((x.shape[1], x.shape[1]))
    for g in np.unique(codes):
        rows = codes == g
        xg = x[rows]
        adjust = np.real(
            scipy.linalg.inv(scipy.linalg.sqrtm(np.eye(rows.sum()) - xg @ bread @ xg.T))
        )
        u = xg.T @ adjust @ resid[rows]
        meat += np.outer(u, u)
    return bread @ meat @ bread


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cr2_matches_the_dense_formula(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 80
    codes = rng.integers(0, 9, n)
    x = np.column_stack([np.ones(n), rng.integers(0, 2, n)]).astype(float)
    y = rng.integers(0, 2, n).astype(float)
    _, cov, _, groups = cr2_coefficients(x, y, codes)
    assert groups == 9
    np.testing.assert_allclose(cov, _dense_cr2(x, y, codes), rtol=1e-10)


def test_cr2_with_singleton_clusters_is_statsmodels_hc2() -> None:
    rng = np.random.default_rng(4)
    n = 50
    x = np.column_stack([np.ones(n), rng.integers(0, 2, n)]).astype(float)
    y = rng.integers(0, 2, n).astype(float)
    _, cov, naive, _ = cr2_coefficients(x, y, np.arange(n))
    hc2 = sm.OLS(y, x).fit(cov_type="HC2").cov_params()
    np.testing.assert_allclose(cov, hc2, rtol=1e-10)
    np.testing.assert_allclose(naive, hc2, rtol=1e-10)


def test_design_effect_and_width_grow_when_tasks_differ() -> None:
    # 10 tasks x 8 pairs; within a task every pair has the same difference
    codes = np.repeat(np.arange(10), 8)
    diffs = np.repeat([1.0, 0, 0, 1, 0, 0, 1, 0, -1, 0], 8)
    result = clustered_mean(diffs, codes)
    assert result.df == 9 and result.clusters == 10 and result.n == 80
    assert result.design_effect is not None and result.design_effect > 4
    iid = clustered_mean(diffs, np.arange(80))
    assert result.high - result.low > 2 * (iid.high - iid.low)


def _truth(shift: float, spread: float) -> float:
    rng = np.random.default_rng(12345)
    a, u = rng.normal(size=(2, 2_000_000))
    return float(np.mean(expit(a + shift + spread * u) - expit(a)))


def _paired_coverage(tasks: int, reps: int, seed: int) -> float:
    """Task logits a_g ~ N(0, 1); the candidate adds 0.4 + u_g, u_g ~ N(0, 0.6^2) (a task x
    version interaction); 2-8 pairs per task. Coverage of the population mean difference."""
    truth = _truth(0.4, 0.6)
    rng = np.random.default_rng(seed)
    covered = 0
    for _ in range(reps):
        sizes = rng.integers(2, 9, tasks)
        a = rng.normal(size=tasks)
        u = rng.normal(size=tasks) * 0.6
        codes = np.repeat(np.arange(tasks), sizes)
        base = rng.random(len(codes)) < expit(a)[codes]
        cand = rng.random(len(codes)) < expit(a + 0.4 + u)[codes]
        result = clustered_mean(cand.astype(float) - base, codes)
        covered += result.low <= truth <= result.high
    return covered / reps


@pytest.mark.parametrize("tasks", [10, 25])
def test_paired_cr2_covers_93_to_97_percent_with_interaction(tasks: int) -> None:
    assert 0.93 <= _paired_coverage(tasks, REPS, seed=tasks) <= 0.97


def test_independent_cr2_covers_93_to_97_percent_with_interaction() -> None:
    # both versions run the same 12 tasks, 2-6 runs each, not paired by seed
    truth = _truth(0.4, 0.6)
    rng = np.random.default_rng(7)
    tasks, covered = 12, 0
    for _ in range(REPS):
        a = rng.normal(size=tasks)
        u = rng.normal(size=tasks) * 0.6
        base_codes = np.repeat(np.arange(tasks), rng.integers(2, 7, tasks))
        cand_codes = np.repeat(np.arange(tasks), rng.integers(2, 7, tasks))
        base = rng.random(len(base_codes)) < expit(a)[base_codes]
        cand = rng.random(len(cand_codes)) < expit(a + 0.4 + u)[cand_codes]
        result = clustered_difference(
            np.concatenate([base, cand]).astype(float),
            np.r_[np.zeros(len(base), bool), np.ones(len(cand), bool)],
            np.concatenate([base_codes, cand_codes]),
        )
        covered += result.low <= truth <= result.high
    # the estimand weights tasks by their runs; sizes are independent of the task effects, so
    # the population value is the task-average one
    assert 0.93 <= covered / REPS <= 0.97


def test_rates_over_few_tasks_use_cr2_not_a_bootstrap() -> None:
    # a bootstrap over 4-8 tasks covered 82-89%; the plain CR2 t interval covers near 95% here
    # but only 88% where two kinds of task mix (exact enumeration, 10 tasks), so a rate's CR2
    # fit carries two pseudo task instances (one completed, one failed): conservative here
    # (99.5% measured, 2026-12-03), never below the nominal level
    rng = np.random.default_rng(11)
    tasks, covered = 10, 0
    truth = float(np.mean(expit(np.random.default_rng(3).normal(size=2_000_000))))
    for _ in range(REPS):
        sizes = rng.integers(2, 9, tasks)
        codes = np.repeat(np.arange(tasks), sizes)
        done = rng.random(len(codes)) < expit(rng.normal(size=tasks))[codes]
        sums = np.bincount(codes, weights=done, minlength=tasks)
        interval = clustered.ratio_interval(
            sums, sizes.astype(float), method="x", n=len(codes), bounded=True
        )
        covered += interval.low <= truth <= interval.high
    assert interval.method.startswith("CR2") and "pseudo task instances" in interval.method
    assert 0.95 <= covered / REPS <= 0.999


def test_stratified_difference_is_ols_with_scenario_intercepts_and_dense_cr2() -> None:
    from scipy.stats import t as student_t

    from steplog.stats.cluster_robust import stratified_difference

    rng = np.random.default_rng(8)
    tasks = 24
    scenario_of_task = np.arange(tasks) % 3  # tasks are nested in scenarios
    codes = rng.integers(0, tasks, 300)
    strata = scenario_of_task[codes]
    candidate = rng.random(300) < 0.5
    y = (rng.random(300) < expit(0.3 * strata + 0.5 * candidate + 0.2 * rng.normal())).astype(float)
    ours = stratified_difference(y, candidate, strata, codes)
    x = np.column_stack([candidate.astype(float), np.eye(3)[strata]])
    fit = sm.OLS(y, x).fit()
    assert ours.estimate == pytest.approx(fit.params[0], abs=1e-12)
    se = np.sqrt(_dense_cr2(x, y, codes)[0, 0])
    assert ours.se == pytest.approx(se, rel=1e-10)
    assert ours.df == tasks - 4
    q = student_t.ppf(0.975, tasks - 4)
    assert (ours.low, ours.high) == pytest.approx((fit.params[0] - q * se, fit.params[0] + q * se))
