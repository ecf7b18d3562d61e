"""One proportion, and the difference or ratio of two independent proportions.

* Single proportion: Wilson score (default), Clopper-Pearson and Jeffreys (scipy).
* Difference: Newcombe's hybrid score interval (Newcombe 1998, method 10; default) and the
  Miettinen-Nurminen score interval (1985), with restricted MLEs by Farrington & Manning (1990).
* Tests: the Miettinen-Nurminen score test (the statistic their interval inverts, at a zero
  difference: it and the MN interval make one family) and Boschloo's exact unconditional test
  (scipy). Ratio: relative risk (scipy, Katz log).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from scipy.optimize import brentq
from scipy.stats import beta, binomtest, boschloo_exact, norm
from scipy.stats.contingency import relative_risk as scipy_relative_risk

from .results import Interval, TestResult

SingleMethod = Literal["wilson", "clopper-pearson", "jeffreys"]
DifferenceMethod = Literal["newcombe", "miettinen-nurminen"]
_EPS = 1e-10


def _check(x: int, n: int) -> None:
    if n <= 0 or x < 0 or x > n:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {x}/{n}")


def proportion(
    x: int, n: int, *, method: SingleMethod = "wilson", confidence: float = 0.95
) -> Interval:
    """The proportion ``x/n`` with a confidence interval."""
    _check(x, n)
    if method == "jeffreys":
        alpha = 1 - confidence
        low = 0.0 if x == 0 else float(beta.ppf(alpha / 2, x + 0.5, n - x + 0.5))
        high = 1.0 if x == n else float(beta.ppf(1 - alpha / 2, x + 0.5, n - x + 0.5))
    else:
        scipy_method = "wilson" if method == "wilson" else "exact"
        ci = binomtest(x, n).proportion_ci(confidence_level=confidence, method=scipy_method)
        low, high = float(ci.low), float(ci.high)
    return Interval(x / n, low, high, method, n, confidence)


def difference(
    x1: int,
    n1: int,
    x2: int,
    n2: int,
    *,
    method: DifferenceMethod = "newcombe",
    confidence: float = 0.95,
) -> Interval:
    """``x1/n1 - x2/n2`` with a confidence interval."""
    _check(x1, n1)
    _check(x2, n2)
    if method == "miettinen-nurminen":
        low, high = _miettinen_nurminen(x1, n1, x2, n2, confidence)
    else:
        low, high = _newcombe_hybrid(x1, n1, x2, n2, confidence)
    return Interval(x1 / n1 - x2 / n2, low, high, method, n1 + n2, confidence)


def _newcombe_hybrid(x1: int, n1: int, x2: int, n2: int, confidence: float) -> tuple[float, float]:
    p1, p2 = x1 / n1, x2 / n2
    w1 = proportion(x1, n1, confidence=confidence)
    w2 = proportion(x2, n2, confidence=confidence)
    delta = p1 - p2
    low = delta - math.sqrt((p1 - w1.low) ** 2 + (w2.high - p2) ** 2)
    high = delta + math.sqrt((w1.high - p1) ** 2 + (p2 - w2.low) ** 2)
    return max(low, -1.0), min(high, 1.0)


def _restricted_mle(p1: float, p2: float, n1: int, n2: int, delta: float) -> tuple[float, float]:
    """MLEs of (p1, p2) under p1 - p2 = delta (Farrington & Manning 1990, eq. 3-4)."""
    theta = n2 / n1
    a = 1 + theta
    b = -(1 + theta + p1 + theta * p2 + delta * (theta + 2))
    c = delta**2 + delta * (2 * p1 + theta + 1) + p1 + theta * p2
    d = -p1 * delta * (1 + delta)
    v = b**3 / (27 * a**3) - b * c / (6 * a**2) + d / (2 * a)
    u_squared = max(b**2 / (9 * a**2) - c / (3 * a), 0.0)
    u = math.copysign(math.sqrt(u_squared), v) if v else math.sqrt(u_squared)
    if u == 0:
        q1 = -b / (3 * a)
    else:
        w = (math.pi + math.acos(max(-1.0, min(1.0, v / u**3)))) / 3
        q1 = 2 * u * math.cos(w) - b / (3 * a)
    q1 = min(max(q1, 0.0), 1.0)
    return q1, min(max(q1 - delta, 0.0), 1.0)


def mn_score(x1: int, n1: int, x2: int, n2: int) -> Callable[[float], float]:
    """Miettinen & Nurminen's (1985) score statistic as a function of the difference: the
    one the MN interval inverts."""
    return _mn_score(x1, n1, x2, n2)


def fm_score(x1: int, n1: int, x2: int, n2: int) -> Callable[[float], float]:
    """Farrington & Manning's (1990) score statistic as a function of the difference (the
    Miettinen-Nurminen statistic without its N / (N - 1) variance factor)."""
    return _mn_score(x1, n1, x2, n2, factor=False)


def _mn_score(
    x1: int, n1: int, x2: int, n2: int, *, factor: bool = True
) -> Callable[[float], float]:
    """Miettinen & Nurminen's (1985) score statistic as a function of the difference."""
    p1, p2 = x1 / n1, x2 / n2
    n = n1 + n2
    inflation = n / (n - 1) if factor else 1.0

    def score(delta: float) -> float:
        numerator = p1 - p2 - delta
        if abs(numerator) < 1e-15:
            return 0.0
        q1, q2 = _restricted_mle(p1, p2, n1, n2, delta)
        variance = (q1 * (1 - q1) / n1 + q2 * (1 - q2) / n2) * inflation
        if variance <= 0:
            return math.copysign(math.inf, numerator)
        return numerator / math.sqrt(variance)

    return score


def _miettinen_nurminen(
    x1: int, n1: int, x2: int, n2: int, confidence: float
) -> tuple[float, float]:
    return score_interval(_mn_score(x1, n1, x2, n2), x1 / n1 - x2 / n2, confidence)


def mn_test(x1: int, n1: int, x2: int, n2: int) -> TestResult:
    """Miettinen-Nurminen score test that ``x1/n1 - x2/n2`` is 0 (two-sided): the pooled
    two-proportion z with the (N - 1)/N variance factor."""
    _check(x1, n1)
    _check(x2, n2)
    z = _mn_score(x1, n1, x2, n2)(0.0)
    if math.isinf(z):
        return TestResult(z, 0.0, "Miettinen-Nurminen score")
    return TestResult(z, float(2 * norm.sf(abs(z))), "Miettinen-Nurminen score")


def score_interval(
    score: Callable[[float], float], estimate: float, confidence: float
) -> tuple[float, float]:
    """Invert a score statistic that falls as the hypothesised difference rises."""
    z = float(norm.ppf(1 - (1 - confidence) / 2))
    low_end, high_end = -1 + _EPS, 1 - _EPS
    low = low_end if score(low_end) <= z else brentq(lambda t: score(t) - z, low_end, estimate)
    high = high_end if score(high_end) >= -z else brentq(lambda t: score(t) + z, estimate, high_end)
    return float(low), float(high)


EXACT_MAX_TABLES = 250_000
"""Boschloo's test enumerates every (n1+1)(n2+1) table; above this, the score test is used."""


def boschloo(x1: int, n1: int, x2: int, n2: int) -> TestResult:
    """Boschloo's exact unconditional test that the two proportions differ (two-sided).

    For large samples, where enumerating every table would take minutes and gigabytes and the
    normal approximation is excellent, the pooled two-proportion score (z) test is used and
    named as such.
    """
    _check(x1, n1)
    _check(x2, n2)
    if (n1 + 1) * (n2 + 1) > EXACT_MAX_TABLES:
        pooled = (x1 + x2) / (n1 + n2)
        variance = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
        if variance == 0:
            return TestResult(0.0, 1.0, "two-proportion score (z)")
        z = (x1 / n1 - x2 / n2) / math.sqrt(variance)
        return TestResult(z, float(2 * norm.sf(abs(z))), "two-proportion score (z)")
    result = boschloo_exact([[x1, x2], [n1 - x1, n2 - x2]], alternative="two-sided")
    return TestResult(float(result.statistic), float(result.pvalue), "Boschloo exact")


def relative_risk(x1: int, n1: int, x2: int, n2: int, *, confidence: float = 0.95) -> Interval:
    """``(x1/n1) / (x2/n2)`` with the Katz log interval (scipy); inf when ``x2 == 0``.

    When both versions succeed every time the Katz variance is 0 and the interval would be
    [1, 1]: then 0.5 is added to every cell (Haldane-Anscombe; Pettigrew et al. 1986) and the
    method says so.
    """
    _check(x1, n1)
    _check(x2, n2)
    if x1 == n1 and x2 == n2:
        log_rr = math.log((x1 + 0.5) / (n1 + 1)) - math.log((x2 + 0.5) / (n2 + 1))
        se = math.sqrt(1 / (x1 + 0.5) - 1 / (n1 + 1) + 1 / (x2 + 0.5) - 1 / (n2 + 1))
        z = float(norm.ppf(1 - (1 - confidence) / 2))
        return Interval(
            1.0,
            math.exp(log_rr - z * se),
            math.exp(log_rr + z * se),
            "Katz log, 0.5 added to each cell",
            n1 + n2,
            confidence,
        )
    result = scipy_relative_risk(x1, n1, x2, n2)
    if x1 == 0 or x2 == 0:
        return Interval(float(result.relative_risk), 0.0, math.inf, "Katz log", n1 + n2, confidence)
    ci = result.confidence_interval(confidence_level=confidence)
    return Interval(
        float(result.relative_risk), float(ci.low), float(ci.high), "Katz log", n1 + n2, confidence
    )
