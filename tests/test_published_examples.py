"""The methods tests/test_stats.py left without an outside reference, each checked against a
published worked example where one exists, else against a from-scratch computation written
here (its own formulas, no steplog code and none of the scipy routine steplog wraps).

* Wilson at 90% and 99% (steplog wraps scipy's ``binomtest``): Wilson's closed form
  (Wilson 1927; Newcombe 1998a, Stat Med 17:857-872, eq. 3), anchored at 95% on Newcombe's
  published Table I limits.
* Jeffreys: no published table was found to cite; the interval is checked against its
  definition (Brown, Cai & DasGupta 2001, Stat Sci 16:101-133, section 4.1.2: the equal-tailed
  Beta(x + 1/2, n - x + 1/2) posterior interval, 0 / 1 at x = 0 / n) by numerical integration.
* Boschloo: a from-scratch enumeration of Boschloo's (1970) definition (Fisher's p-value as
  the statistic, maximised over the nuisance proportion).
* Katz log relative risk: the published formula (Katz et al. 1978, Biometrics 34:469-474;
  Gardner & Altman, Statistics with Confidence, 1989, pp. 51-52) and scipy's documented
  example (10/75 vs 12/225: 2.5, 1.1262 to 5.5499).
* Kaplan-Meier with Greenwood limits: the 6-MP arm of Freireich et al. (1963); survival and
  Greenwood standard errors as published in Klein & Moeschberger (2003), Survival Analysis,
  2nd ed., Table 4.1A; log-log limits by Kalbfleisch & Prentice's transform (K&M eq. 4.3.2).
* The cluster bootstrap has no closed form: its properties are checked against an independent
  resampling written here and against the design-effect arithmetic of wholly correlated tasks.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from steplog.stats import clustered, proportions, survival
from steplog.stats.survival import StepOutcome


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def wilson_by_hand(x: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson (1927), as Newcombe (1998a) eq. 3 writes it."""
    z = _z(confidence)
    p = x / n
    centre = 2 * n * p + z * z
    spread = z * math.sqrt(z * z + 4 * n * p * (1 - p))
    denominator = 2 * (n + z * z)
    return (centre - spread) / denominator, (centre + spread) / denominator


# --- Wilson at non-default levels ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "n", "published"),
    [(81, 263, (0.2553, 0.3662)), (15, 148, (0.0624, 0.1605)), (1, 29, (0.0061, 0.1718))],
)
def test_the_hand_wilson_formula_reproduces_newcombe_1998a_table_i(
    x: int, n: int, published: tuple[float, float]
) -> None:
    """The reference formula of the next test is itself right: Newcombe's 95% limits."""
    low, high = wilson_by_hand(x, n, 0.95)
    assert (round(low, 4), round(high, 4)) == published


@pytest.mark.parametrize("confidence", [0.80, 0.90, 0.99, 0.999])
@pytest.mark.parametrize(("x", "n"), [(81, 263), (15, 148), (0, 20), (1, 29), (29, 29)])
def test_wilson_follows_the_requested_level(confidence: float, x: int, n: int) -> None:
    got = proportions.proportion(x, n, confidence=confidence)
    low, high = wilson_by_hand(x, n, confidence)
    assert got.low == pytest.approx(max(low, 0.0), abs=1e-9)
    assert got.high == pytest.approx(min(high, 1.0), abs=1e-9)
    assert got.confidence == confidence
    default = proportions.proportion(x, n)
    # a different level is a different interval (nested: a higher level is wider)
    if confidence > 0.95:
        assert got.high - got.low > default.high - default.low
    else:
        assert got.high - got.low < default.high - default.low


def test_newcombe_difference_follows_the_requested_level() -> None:
    """Newcombe's hybrid (method 10) from the hand Wilson limits at 90% (Newcombe 1998b eq.)."""
    x1, n1, x2, n2 = 56, 70, 48, 80  # Newcombe 1998b, example (a)
    p1, p2 = x1 / n1, x2 / n2
    l1, u1 = wilson_by_hand(x1, n1, 0.90)
    l2, u2 = wilson_by_hand(x2, n2, 0.90)
    d = p1 - p2
    low = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    got = proportions.difference(x1, n1, x2, n2, confidence=0.90)
    assert (got.low, got.high) == pytest.approx((low, high), abs=1e-9)
    assert (round(got.low, 4), round(got.high, 4)) != (0.0524, 0.3339)  # not the 95% answer


# --- Jeffreys ----------------------------------------------------------------------------------


def _posterior_mass_below(limit: float, a: float, b: float, steps: int = 200_000) -> float:
    """P(p < limit) under Beta(a, b), by the midpoint rule on the substitution p = u**2
    (which removes the integrable singularity at 0 for a = 1/2)."""
    u = (np.arange(steps) + 0.5) / steps * math.sqrt(limit)
    p = u * u
    log_density = (a - 1) * np.log(p) + (b - 1) * np.log1p(-p)
    log_norm = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    integrand = np.exp(log_density - log_norm) * 2 * u
    return float(integrand.sum() * math.sqrt(limit) / steps)


@pytest.mark.parametrize("confidence", [0.90, 0.95, 0.99])
@pytest.mark.parametrize(("x", "n"), [(81, 263), (1, 29), (3, 10), (15, 148)])
def test_jeffreys_limits_leave_alpha_over_two_in_each_tail(
    confidence: float, x: int, n: int
) -> None:
    j = proportions.proportion(x, n, method="jeffreys", confidence=confidence)
    a, b = x + 0.5, n - x + 0.5
    tail = (1 - confidence) / 2
    assert _posterior_mass_below(j.low, a, b) == pytest.approx(tail, abs=2e-5)
    # the upper tail by symmetry: P(p > high) under Beta(a, b) = P(q < 1 - high), Beta(b, a)
    assert _posterior_mass_below(1 - j.high, b, a) == pytest.approx(tail, abs=2e-5)


def test_jeffreys_boundary_rule_of_brown_cai_dasgupta() -> None:
    """Section 4.1.2: the lower limit is 0 at x = 0, the upper 1 at x = n (the other limit as
    usual)."""
    zero = proportions.proportion(0, 20, method="jeffreys")
    assert zero.low == 0.0
    assert _posterior_mass_below(zero.high, 0.5, 20.5) == pytest.approx(0.975, abs=2e-5)
    full = proportions.proportion(20, 20, method="jeffreys")
    assert full.high == 1.0
    assert _posterior_mass_below(full.low, 20.5, 0.5, steps=400_000) == pytest.approx(
        0.025, abs=5e-5
    )


# --- Boschloo ----------------------------------------------------------------------------------


def _fisher_one_sided(k: int, n1: int, n2: int, total: int) -> float:
    """P(X1 >= k) given the margins (hypergeometric), from binomial coefficients."""
    upper = min(n1, total)
    denominator = math.comb(n1 + n2, total)
    return sum(math.comb(n1, i) * math.comb(n2, total - i) for i in range(k, upper + 1)) / (
        denominator
    )


def boschloo_by_hand(x1: int, n1: int, x2: int, n2: int, grid: int = 4001) -> float:
    """Boschloo (1970), two-sided as twice the smaller one-sided p (capped at 1): for each
    one-sided alternative, the tables whose Fisher p-value is at most the observed one, their
    probability maximised over the common proportion (on a fine grid)."""
    pis = np.linspace(0.0, 1.0, grid)[1:-1]
    log_b1 = np.array(
        [[math.log(math.comb(n1, i)) + 0.0] for i in range(n1 + 1)]
    )  # shape (n1+1, 1)
    log_b2 = np.array([[math.log(math.comb(n2, j))] for j in range(n2 + 1)])

    def side(greater: bool) -> float:
        def stat(a: int, b: int) -> float:
            if greater:
                return _fisher_one_sided(a, n1, n2, a + b)
            return _fisher_one_sided(b, n2, n1, a + b)  # the mirror: X2 large = X1 small

        observed = stat(x1, x2)
        total = np.zeros_like(pis)
        for a in range(n1 + 1):
            for b in range(n2 + 1):
                if stat(a, b) <= observed * (1 + 1e-9):
                    log_p = (
                        log_b1[a, 0]
                        + log_b2[b, 0]
                        + (a + b) * np.log(pis)
                        + (n1 + n2 - a - b) * np.log1p(-pis)
                    )
                    total += np.exp(log_p)
        return float(total.max())

    return min(1.0, 2 * min(side(True), side(False)))


@pytest.mark.parametrize(
    ("x1", "n1", "x2", "n2"), [(7, 12, 1, 8), (9, 10, 3, 10), (10, 15, 8, 15), (3, 14, 0, 6)]
)
def test_boschloo_matches_an_enumeration_of_its_definition(
    x1: int, n1: int, x2: int, n2: int
) -> None:
    got = proportions.boschloo(x1, n1, x2, n2)
    assert got.test == "Boschloo exact"
    assert got.p_value == pytest.approx(boschloo_by_hand(x1, n1, x2, n2), abs=2e-3)


# --- Katz log relative risk --------------------------------------------------------------------


def katz_by_hand(a: int, n1: int, c: int, n2: int, confidence: float) -> tuple[float, float]:
    rr = (a / n1) / (c / n2)
    se = math.sqrt(1 / a - 1 / n1 + 1 / c - 1 / n2)
    z = _z(confidence)
    return rr * math.exp(-z * se), rr * math.exp(z * se)


def test_katz_relative_risk_on_the_documented_example() -> None:
    """scipy's documented example (which cites Katz et al. 1978, Method C)."""
    got = proportions.relative_risk(10, 75, 12, 225)
    assert got.estimate == pytest.approx(2.5)
    assert (round(got.low, 4), round(got.high, 4)) == (1.1262, 5.5499)
    assert got.method == "Katz log"


@pytest.mark.parametrize("confidence", [0.90, 0.95, 0.99])
@pytest.mark.parametrize(("a", "n1", "c", "n2"), [(10, 75, 12, 225), (45, 50, 30, 50)])
def test_katz_relative_risk_follows_the_formula_and_the_level(
    confidence: float, a: int, n1: int, c: int, n2: int
) -> None:
    got = proportions.relative_risk(a, n1, c, n2, confidence=confidence)
    assert (got.low, got.high) == pytest.approx(katz_by_hand(a, n1, c, n2, confidence), rel=1e-9)


# --- Kaplan-Meier with Greenwood / log-log limits ---------------------------------------------

# 6-MP arm of Freireich et al. (1963): weeks in remission, 1 = relapse, 0 = censored.
SIX_MP = [(6, 1), (6, 1), (6, 1), (6, 0), (7, 1), (9, 0), (10, 1), (10, 0), (11, 0), (13, 1),
          (16, 1), (17, 0), (19, 0), (20, 0), (22, 1), (23, 1), (25, 0), (32, 0), (32, 0),
          (34, 0), (35, 0)]  # fmt: skip
# Klein & Moeschberger (2003) Table 4.1A: Greenwood standard errors of S(t) at the event times
# (S itself is checked in tests/test_stats.py).
KLEIN_MOESCHBERGER_4_1A = {
    6: 0.076, 7: 0.087, 10: 0.096, 13: 0.107, 16: 0.114, 22: 0.128, 23: 0.135
}  # fmt: skip


def km_greenwood_by_hand(data: list[tuple[int, int]]) -> dict[int, tuple[float, float, float]]:
    """time -> (S, Greenwood SE, Greenwood sum) at each event time."""
    out = {}
    s, greenwood = 1.0, 0.0
    for t in sorted({t for t, e in data if e}):
        at_risk = sum(1 for u, _ in data if u >= t)
        deaths = sum(1 for u, e in data if u == t and e)
        s *= 1 - deaths / at_risk
        greenwood += deaths / (at_risk * (at_risk - deaths))
        out[t] = (s, s * math.sqrt(greenwood), greenwood)
    return out


def test_hand_greenwood_reproduces_klein_moeschberger_table_4_1a() -> None:
    by_hand = km_greenwood_by_hand(SIX_MP)
    assert {t: round(v[1], 3) for t, v in by_hand.items()} == KLEIN_MOESCHBERGER_4_1A


@pytest.mark.parametrize("confidence", [0.90, 0.95])
def test_kaplan_meier_limits_are_the_log_log_greenwood_limits(confidence: float) -> None:
    curve = survival.kaplan_meier(
        [StepOutcome(t, bool(e)) for t, e in SIX_MP], confidence=confidence
    )
    at = {point.step: point for point in curve}
    z = _z(confidence)
    for t, (s, _se, greenwood) in km_greenwood_by_hand(SIX_MP).items():
        # Kalbfleisch & Prentice: theta = exp(z * sqrt(V) / ln S), V the Greenwood sum
        theta = math.exp(z * math.sqrt(greenwood) / math.log(s))
        low, high = s ** (1 / theta), s**theta
        assert at[t].survival == pytest.approx(s, abs=1e-12)
        assert (at[t].low, at[t].high) == pytest.approx((low, high), abs=1e-9), t


# --- the cluster bootstrap ---------------------------------------------------------------------

METHOD = "cluster bootstrap (BCa) by task instance"


def percentile_cluster_bootstrap(
    keys: list[str], values: list[float], confidence: float, reps: int = 20_000
) -> tuple[float, float]:
    """An independent cluster bootstrap: resample whole tasks, ratio of totals, percentiles."""
    tasks = sorted(set(keys))
    sums = np.array([sum(v for k, v in zip(keys, values, strict=True) if k == t) for t in tasks])
    counts = np.array([sum(1 for k in keys if k == t) for t in tasks], dtype=float)
    rng = np.random.default_rng(12345)
    picks = rng.integers(0, len(tasks), size=(reps, len(tasks)))
    means = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


@pytest.mark.parametrize("confidence", [0.90, 0.95])
def test_cluster_bootstrap_agrees_with_an_independent_resampling(confidence: float) -> None:
    rng = np.random.default_rng(7)
    keys, values = [], []
    for task in range(40):
        p = rng.uniform(0.2, 0.9)
        size = int(rng.integers(2, 9))
        keys += [f"t{task}"] * size
        values += [float(v) for v in rng.random(size) < p]
    got = clustered.cluster_bootstrap(keys, values, method=METHOD, confidence=confidence)
    low, high = percentile_cluster_bootstrap(keys, values, confidence)
    assert got.estimate == pytest.approx(sum(values) / len(values))
    # BCa and percentile limits differ by a skewness correction; both are Monte Carlo
    assert got.low == pytest.approx(low, abs=0.015)
    assert got.high == pytest.approx(high, abs=0.015)


def test_wholly_correlated_tasks_give_the_width_of_one_observation_per_task() -> None:
    """50 tasks of 10 runs each that wholly pass (25) or wholly fail (25): the information is
    that of 50 observations, so the interval is about 0.5 +- z * sqrt(0.25 / 50), not the
    +- z * sqrt(0.25 / 500) of 500 independent runs (design effect 1 + (m - 1) rho = 10)."""
    keys = [f"task{i // 10}" for i in range(500)]
    values = [float(i // 10 < 25) for i in range(500)]
    got = clustered.cluster_bootstrap(keys, values, method=METHOD)
    half = (got.high - got.low) / 2
    expected = _z(0.95) * math.sqrt(0.25 / 50)
    assert half == pytest.approx(expected, rel=0.10)
    assert half > 2.5 * _z(0.95) * math.sqrt(0.25 / 500)


def test_independent_runs_give_about_the_binomial_width() -> None:
    """One run per task: the cluster bootstrap is the ordinary bootstrap of a proportion, whose
    half-width is about z * sqrt(p q / n)."""
    rng = np.random.default_rng(11)
    values = [float(v) for v in rng.random(400) < 0.3]
    keys = [f"t{i}" for i in range(400)]
    got = clustered.cluster_bootstrap(keys, values, method=METHOD)
    p = sum(values) / 400
    assert (got.high - got.low) / 2 == pytest.approx(
        _z(0.95) * math.sqrt(p * (1 - p) / 400), rel=0.10
    )
