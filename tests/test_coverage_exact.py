"""Exact coverage by enumeration (no simulation error): for small n, every possible table is
weighted by its probability under the true rates, and the intervals the decision rule uses --
Wilson per version, Miettinen-Nurminen (independent) and Tango (paired) for the difference --
are checked to cover the truth near the nominal 95% on average over a grid of true rates
(Brown, Cai & DasGupta 2001 judge intervals this way), never falling far below it.

The pointwise coverage of any interval for a discrete count oscillates with the true rate, so
each method also gets a floor for its worst grid point (Wilson's dips to about 0.90 at n = 10
near the ends of the range; the score intervals for a difference stay above 0.92).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import gammaln
from scipy.stats import binom

from steplog.stats import paired, proportions
from steplog.stats.paired import PairedTable


@pytest.mark.parametrize("n", [10, 20, 40])
def test_wilson_exact_coverage(n: int) -> None:
    intervals = [proportions.proportion(x, n) for x in range(n + 1)]
    low = np.array([i.low for i in intervals])
    high = np.array([i.high for i in intervals])
    coverage = np.array(
        [
            (binom.pmf(np.arange(n + 1), n, p) * ((low <= p) & (p <= high))).sum()
            for p in np.linspace(0.01, 0.99, 99)
        ]
    )
    assert 0.945 <= coverage.mean() <= 0.96
    assert coverage.min() >= 0.90


@pytest.mark.parametrize("n", [10, 15, 20])
def test_miettinen_nurminen_exact_coverage(n: int) -> None:
    low = np.empty((n + 1, n + 1))
    high = np.empty((n + 1, n + 1))
    for x1 in range(n + 1):
        for x2 in range(n + 1):
            d = proportions.difference(x1, n, x2, n, method="miettinen-nurminen")
            low[x1, x2], high[x1, x2] = d.low, d.high
    counts = np.arange(n + 1)
    coverage = []
    for p1 in np.linspace(0.05, 0.95, 19):
        for p2 in np.linspace(0.05, 0.95, 19):
            weight = np.outer(binom.pmf(counts, n, p1), binom.pmf(counts, n, p2))
            covered = (low <= p1 - p2) & (p1 - p2 <= high)
            coverage.append(float((weight * covered).sum()))
    assert 0.945 <= np.mean(coverage) <= 0.965
    assert min(coverage) >= 0.92


@pytest.mark.parametrize("n", [10, 20])
def test_tango_exact_coverage(n: int) -> None:
    # Tango's interval depends on n, b (candidate only) and c (baseline only) alone
    cells = [(b, c) for b in range(n + 1) for c in range(n + 1 - b)]
    b = np.array([cell[0] for cell in cells])
    c = np.array([cell[1] for cell in cells])
    bounds = np.array(
        [(t.low, t.high) for t in (paired.tango(PairedTable(n - i - j, i, j, 0)) for i, j in cells)]
    )
    log_ways = gammaln(n + 1) - gammaln(b + 1) - gammaln(c + 1) - gammaln(n - b - c + 1)
    coverage = []
    for pb in np.linspace(0.05, 0.45, 9):
        for pc in np.linspace(0.05, 0.45, 9):
            rest = 1 - pb - pc
            weight = np.exp(log_ways + b * np.log(pb) + c * np.log(pc) + (n - b - c) * np.log(rest))
            covered = (bounds[:, 0] <= pb - pc) & (pb - pc <= bounds[:, 1])
            coverage.append(float((weight * covered).sum()))
    assert 0.945 <= np.mean(coverage) <= 0.97
    assert min(coverage) >= 0.93
