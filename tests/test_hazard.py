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
