"""Long horizon per scenario (item 6): the discrete-time hazard model against statsmodels' GLM
with a cluster sandwich, the stratified logrank against statsmodels' survdiff, and a fixed
failure at step 2 no longer reported as a rising hazard."""

from __future__ import annotations

import numpy as np
import pytest
import statsmodels.api as sm
from scipy.stats import CensoredData, logrank
from statsmodels.duration.survfunc import survdiff

from steplog.stats.hazard import discrete_hazard_trend, person_steps, stratified_logrank


def _data(seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    n = 300
    strata = rng.integers(0, 3, n)
    clusters = rng.integers(0, 40, n)
    horizon = np.array([5, 8, 12])[strata]
    steps = np.minimum(rng.geometric(0.12, n), horizon)
    failed = (steps < horizon) | (rng.random(n) < 0.1)
    return steps, failed, strata, clusters


def test_person_steps_by_hand() -> None:
    run, step, event = person_steps(np.array([2, 3]), np.array([True, False]))
    assert run.tolist() == [0, 0, 1, 1, 1]
    assert step.tolist() == [1, 2, 1, 2, 3]
    assert event.tolist() == [0, 1, 0, 0, 0]


@pytest.mark.parametrize("seed", [0, 1])
def test_hazard_slope_matches_statsmodels_glm_cluster(seed: int) -> None:
    steps, failed, strata, clusters = _data(seed)
    ours = discrete_hazard_trend(steps, failed, strata, clusters)
    assert ours is not None
    run, step, event = person_steps(steps, failed)
    x = np.column_stack([(strata[run] == k).astype(float) for k in range(3)] + [step - step.mean()])
    fit = sm.GLM(event, x, family=sm.families.Binomial()).fit(
        cov_type="cluster", cov_kwds={"groups": clusters[run], "use_correction": True}
    )
    assert ours.slope == pytest.approx(fit.params[-1], abs=1e-8)
    # statsmodels' small-sample factor is G/(G-1) * (N-1)/(N-K); ours is G/(G-1) (CR1)
    rows, k = len(run), x.shape[1]
    se = fit.bse[-1] / np.sqrt((rows - 1) / (rows - k))
    assert ours.statistic == pytest.approx(ours.slope / se, rel=1e-6)
    assert ours.df == 39 and ours.clusters == 40


def test_a_fixed_failure_at_step_2_is_not_a_rising_hazard() -> None:
    rng = np.random.default_rng(3)
    n = 400
    clusters = rng.integers(0, 25, n)
    fails = rng.random(n) < 0.3
    steps = np.where(fails, 2, 10)
    trend = discrete_hazard_trend(steps, fails, np.zeros(n, dtype=np.intp), clusters)
    assert trend is not None
    assert not (trend.slope > 0 and trend.p_value < 0.05)


def test_stratified_logrank_matches_statsmodels_survdiff() -> None:
    steps, failed, strata, _ = _data(4)
    group = (np.arange(len(steps)) % 2).astype(int)
    parts = []
    for s in range(3):
        a, b = (strata == s) & (group == 0), (strata == s) & (group == 1)
        parts.append((steps[a], failed[a], steps[b], failed[b]))
    ours = stratified_logrank(parts)
    statistic, p_value = survdiff(steps, failed.astype(int), group, strata=strata)
    assert ours.statistic**2 == pytest.approx(statistic, rel=1e-9)
    assert ours.p_value == pytest.approx(p_value, rel=1e-9)
    # one stratum is scipy's logrank
    a, b = group == 0, group == 1
    one = stratified_logrank([(steps[a], failed[a], steps[b], failed[b])])
    theirs = logrank(
        CensoredData(uncensored=steps[a & failed], right=steps[a & ~failed]),
        CensoredData(uncensored=steps[b & failed], right=steps[b & ~failed]),
    )
    assert one.statistic == pytest.approx(theirs.statistic, rel=1e-9)


def test_aalen_johansen_matches_statsmodels() -> None:
    from statsmodels.duration.survfunc import CumIncidenceRight

    from steplog.stats.competing import cumulative_incidence

    rng = np.random.default_rng(0)
    steps = rng.integers(1, 10, 200)
    cause = rng.choice([0, 1, 2], p=[0.5, 0.3, 0.2], size=200)
    ours = cumulative_incidence(steps, cause)
    theirs = CumIncidenceRight(steps, cause)
    by_step = {p["step"]: p for p in ours}
    for i, t in enumerate(theirs.times):
        assert by_step[int(t)]["failed"] == pytest.approx(theirs.cinc[0][i], abs=1e-12)
        assert by_step[int(t)]["aborted"] == pytest.approx(theirs.cinc[1][i], abs=1e-12)
    # aborts are a competing risk, not censoring: 1 - KM of failures alone is larger
    km_failure = 1 - np.prod([1 - p_fail for p_fail in _failure_hazards(steps, cause)])
    assert km_failure > ours[-1]["failed"]


def _failure_hazards(steps: np.ndarray, cause: np.ndarray) -> list[float]:
    return [
        np.sum((steps == t) & (cause == 1)) / np.sum(steps >= t) for t in range(1, steps.max() + 1)
    ]


def test_logrank_score_residuals_match_statsmodels_phreg() -> None:
    from statsmodels.duration.hazard_regression import PHReg

    from steplog.stats.hazard import _logrank_parts, logrank_score_residuals

    rng = np.random.default_rng(0)
    n = 300
    steps = rng.integers(1, 12, n)
    failed = rng.random(n) < 0.4
    group = rng.random(n) < 0.5
    strata = rng.integers(0, 3, n)
    ours = logrank_score_residuals(steps, failed, group, strata)
    model = PHReg(steps, group.astype(float)[:, None], status=failed.astype(int), strata=strata)
    theirs = model.score_residuals(np.zeros(1))[:, 0]  # Breslow ties, beta = 0
    np.testing.assert_allclose(ours, theirs, atol=1e-12)
    o_minus_e = sum(
        _logrank_parts(
            steps[(strata == s) & group],
            failed[(strata == s) & group],
            steps[(strata == s) & ~group],
            failed[(strata == s) & ~group],
        )[0]
        for s in range(3)
    )
    assert ours.sum() == pytest.approx(o_minus_e, abs=1e-9)


def test_clustered_logrank_holds_its_level_when_tasks_differ() -> None:
    # 20 tasks with their own per-step hazard, each run 1-12 times per version, no version
    # effect: the cluster-robust logrank rejects about 5%; runs-as-independent rejects more
    from steplog.stats.hazard import clustered_logrank

    rng = np.random.default_rng(8)
    tasks, reps = 20, 400
    clustered_rejects = naive_rejects = 0
    for _ in range(reps):
        base_n, cand_n = rng.integers(1, 13, tasks), rng.integers(1, 13, tasks)
        codes = np.r_[np.repeat(np.arange(tasks), base_n), np.repeat(np.arange(tasks), cand_n)]
        group = np.r_[np.zeros(base_n.sum(), bool), np.ones(cand_n.sum(), bool)]
        hazard = rng.beta(0.4, 2, tasks)[codes]
        first_failure = rng.geometric(hazard)
        failed = first_failure <= 10
        steps = np.minimum(first_failure, 10)
        strata = np.zeros(len(codes), dtype=np.intp)
        clustered_rejects += clustered_logrank(steps, failed, group, strata, codes).p_value < 0.05
        naive = clustered_logrank(steps, failed, group, strata, np.arange(len(codes)))
        naive_rejects += naive.p_value < 0.05
    assert clustered_rejects / reps <= 0.08
    assert naive_rejects / reps > 0.1, (naive_rejects, clustered_rejects)


# --- per-step success with the task instance as the unit; p^N at each run's own length --------


def _dense_cr2_mean(y: np.ndarray, codes: np.ndarray) -> float:
    """Var of the mean of y by CR2 (Bell & McCaffrey 2002) straight from the matrix formula."""
    import scipy.linalg

    x = np.ones((len(y), 1))
    bread = np.linalg.inv(x.T @ x)
    resid = y - x @ (bread @ x.T @ y)
    meat = np.zeros((1, 1))
    for g in np.unique(codes):
        rows = codes == g
        xg = x[rows]
        adjust = np.real(
            scipy.linalg.inv(scipy.linalg.sqrtm(np.eye(rows.sum()) - xg @ bread @ xg.T))
        )
        u = xg.T @ adjust @ resid[rows]
        meat += np.outer(u, u)
    return float((bread @ meat @ bread)[0, 0])


def test_step_success_over_few_tasks_is_cr2_on_the_person_steps() -> None:
    from scipy.stats import t as student_t

    from steplog.compare import step_success_by_task
    from steplog.stats.clustered import Clusters
    from steplog.stats.survival import StepOutcomes

    rng = np.random.default_rng(5)
    tasks = rng.integers(0, 6, 60)
    hazard = np.array([0.02, 0.05, 0.1, 0.15, 0.08, 0.3])[tasks]
    steps = np.minimum(rng.geometric(hazard), 10)
    failed = (steps < 10) | (rng.random(60) < hazard)
    items = StepOutcomes(steps.astype(np.int64), failed)
    interval = step_success_by_task(items, Clusters.of([f"t{t}" for t in tasks]), 0.95)
    run, _step, event = person_steps(items.steps, items.failed)
    passed = 1.0 - event  # one row per step entered: 1 if the run got past it
    se = np.sqrt(_dense_cr2_mean(passed, tasks[run]))
    q = student_t.ppf(0.975, 5)
    assert interval.estimate == pytest.approx(passed.mean(), abs=1e-12)
    assert (interval.low, interval.high) == pytest.approx(
        (passed.mean() - q * se, passed.mean() + q * se), abs=1e-10
    )
    assert "CR2" in interval.method


def test_step_success_without_failures_is_wilson_on_the_steps() -> None:
    from statsmodels.stats.proportion import proportion_confint

    from steplog.compare import step_success_by_task
    from steplog.stats.clustered import Clusters
    from steplog.stats.survival import StepOutcomes

    items = StepOutcomes(np.full(30, 5, dtype=np.int64), np.zeros(30, dtype=bool))
    interval = step_success_by_task(items, Clusters.of([f"t{i % 3}" for i in range(30)]), 0.95)
    low, high = proportion_confint(150, 150, method="wilson")
    assert (interval.low, interval.high) == pytest.approx((low, high), abs=1e-12)


def test_implied_completion_uses_each_runs_own_length() -> None:
    from steplog.stats.results import Interval
    from steplog.stats.survival import implied_completion

    p = Interval(0.9, 0.85, 0.95, "x", 100)
    mixed = implied_completion(p, np.array([3, 3, 12]))
    assert mixed.estimate == pytest.approx((2 * 0.9**3 + 0.9**12) / 3)
    assert mixed.low == pytest.approx((2 * 0.85**3 + 0.85**12) / 3)
    assert mixed.high == pytest.approx((2 * 0.95**3 + 0.95**12) / 3)
    assert "N 3-12" in mixed.method
    assert implied_completion(p, 7).estimate == pytest.approx(0.9**7)
