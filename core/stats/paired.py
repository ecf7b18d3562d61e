"""Paired comparisons: both versions ran the same items (scenario, task instance, seed).

The 2x2 table counts pairs: both completed, only the candidate completed, only the baseline
completed, neither. The difference is candidate minus baseline:
``(candidate_only - baseline_only) / pairs``.

* Tests: McNemar exact (conditional binomial), mid-p (Fagerland et al. 2013's recommendation)
  and asymptotic; :func:`tango_test` is Tango's score statistic at a zero difference, which is
  McNemar's asymptotic z, so it and Tango's interval make one family (the interval excludes 0
  exactly when the test rejects).
* Interval: Tango's score interval (Tango 1998; default) and Newcombe's square-and-add interval
  for paired data (Newcombe 1998b, method 10, with its continuity-corrected phi).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from scipy.stats import binom, chi2

from .proportions import proportion, score_interval
from .results import Interval, TestResult


@dataclass(frozen=True, slots=True)
class PairedTable:
    """Pairs by outcome: ``both``, ``candidate_only``, ``baseline_only``, ``neither``."""

    both: int
    candidate_only: int
    baseline_only: int
    neither: int

    def __post_init__(self) -> None:
        if min(self.both, self.candidate_only, self.baseline_only, self.neither) < 0:
            raise ValueError(f"paired counts must be >= 0, got {self}")
        if self.n == 0:
            raise ValueError("the paired table is empty")

    @property
    def n(self) -> int:
        """Number of pairs."""
        return self.both + self.candidate_only + self.baseline_only + self.neither

    @property
    def difference(self) -> float:
        """Candidate completion rate minus baseline completion rate."""
        return (self.candidate_only - self.baseline_only) / self.n

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {**asdict(self), "pairs": self.n}


def mcnemar_exact(table: PairedTable) -> TestResult:
    """Two-sided exact conditional McNemar test (binomial on the discordant pairs)."""
    b, c = table.candidate_only, table.baseline_only
    m = b + c
    if m == 0:
        return TestResult(None, 1.0, "McNemar exact")
    p = min(1.0, 2 * float(binom.cdf(min(b, c), m, 0.5)))
    return TestResult(float(min(b, c)), p, "McNemar exact")


def mcnemar_mid_p(table: PairedTable) -> TestResult:
    """McNemar mid-p: the exact p-value minus the probability of the observed table."""
    b, c = table.candidate_only, table.baseline_only
    m = b + c
    if m == 0:
        return TestResult(None, 1.0, "McNemar mid-p")
    exact = 2 * float(binom.cdf(min(b, c), m, 0.5))
    p = exact - float(binom.pmf(min(b, c), m, 0.5))
    return TestResult(float(min(b, c)), min(1.0, p), "McNemar mid-p")


def mcnemar_asymptotic(table: PairedTable) -> TestResult:
    """McNemar's chi-square test without continuity correction."""
    b, c = table.candidate_only, table.baseline_only
    if b + c == 0:
        return TestResult(0.0, 1.0, "McNemar asymptotic")
    statistic = (b - c) ** 2 / (b + c)
    return TestResult(statistic, float(chi2.sf(statistic, 1)), "McNemar asymptotic")


def tango_score(table: PairedTable) -> Callable[[float], float]:
    """Tango's (1998) score statistic as a function of the hypothesised difference."""
    n, b, c = table.n, table.candidate_only, table.baseline_only

    def score(delta: float) -> float:
        numerator = b - c - n * delta
        if abs(numerator) < 1e-12:
            return 0.0
        w = -b - c + (2 * n - b + c) * delta
        q21 = (math.sqrt(max(w * w + 8 * n * c * delta * (1 - delta), 0.0)) - w) / (4 * n)
        variance = n * (2 * q21 + delta * (1 - delta))
        if variance <= 0:
            return math.copysign(math.inf, numerator)
        return numerator / math.sqrt(variance)

    return score


def tango(table: PairedTable, *, confidence: float = 0.95) -> Interval:
    """Tango's (1998) asymptotic score interval for the paired difference."""
    n = table.n
    low, high = score_interval(tango_score(table), table.difference, confidence)
    return Interval(table.difference, low, high, "Tango score", n, confidence)


def tango_test(table: PairedTable) -> TestResult:
    """Tango's score test of a zero paired difference: the statistic his interval inverts,
    evaluated at 0, which is McNemar's z = (b - c) / sqrt(b + c) (two-sided)."""
    b, c = table.candidate_only, table.baseline_only
    if b + c == 0:
        return TestResult(0.0, 1.0, "Tango score")
    z = (b - c) / math.sqrt(b + c)
    return TestResult(z, float(chi2.sf(z * z, 1)), "Tango score")


def newcombe_paired(table: PairedTable, *, confidence: float = 0.95) -> Interval:
    """Newcombe's (1998b, method 10) square-and-add interval for paired proportions.

    Wilson intervals for both margins, combined with the continuity-corrected correlation
    phi* of the paper: (AD - BC - N/2) / sqrt(EFGH) when AD - BC > N/2, 0 when
    0 <= AD - BC <= N/2, (AD - BC) / sqrt(EFGH) when negative, and 0 if any margin is empty.
    """
    n = table.n
    a, b, c, d = table.both, table.candidate_only, table.baseline_only, table.neither
    candidate = proportion(a + b, n, confidence=confidence)
    baseline = proportion(a + c, n, confidence=confidence)
    p1, p2 = candidate.estimate, baseline.estimate
    denominator = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    if not denominator or 0 <= cross <= n / 2:
        phi = 0.0
    elif cross > n / 2:
        phi = (cross - n / 2) / math.sqrt(denominator)
    else:
        phi = cross / math.sqrt(denominator)
    dl1, du1 = p1 - candidate.low, candidate.high - p1
    dl2, du2 = p2 - baseline.low, baseline.high - p2
    low = (p1 - p2) - math.sqrt(max(dl1**2 - 2 * phi * dl1 * du2 + du2**2, 0.0))
    high = (p1 - p2) + math.sqrt(max(du1**2 - 2 * phi * du1 * dl2 + dl2**2, 0.0))
    return Interval(
        p1 - p2, max(low, -1.0), min(high, 1.0), "Newcombe paired square-and-add", n, confidence
    )
