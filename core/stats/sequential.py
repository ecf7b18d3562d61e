"""Anytime-valid comparison: a confidence sequence for the mean paired difference.

Betting confidence sequence of Waudby-Smith & Ramdas (2024, JRSS-B 86(1), "Estimating means of
bounded random variables by betting"): hedged capital process with the predictable plug-in
bets (their eqs. 26-27 and section 4.2). Each paired difference d in {-1, 0, 1} is mapped to
x = (d + 1) / 2 in [0, 1]; for a hypothesised mean m the capital

    K_t(m) = 1/2 prod (1 + l+_i (x_i - m)) + 1/2 prod (1 - l-_i (x_i - m))

is a nonnegative martingale under m, so by Ville's inequality P(some K_t(m) >= 1/alpha) <=
alpha: the set of m with capital below 1/alpha so far (intersected over time) covers the true
mean at every t simultaneously, however often one looks. ``K_t`` at m = 1/2 (no difference)
is an e-process against "no difference".

It assumes the pairs arrive as independent draws (e.g. task instances sampled at random); a
fixed set of tasks replayed in a fixed order is a different question.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BET_CAP = 0.5  # c in the paper: bets never stake more than half the allowed range
GRID = 2001


@dataclass(frozen=True, slots=True)
class ConfidenceSequence:
    """The running confidence sequence after ``pairs`` pairs, and the e-value against 0."""

    estimate: float
    low: float
    high: float
    pairs: int
    e_value: float
    confidence: float
    e_value_max: float | None = None
    """The running maximum of the e-process at no difference: the statistic the decision uses
    (the sequence excludes 0 once it reaches 1/alpha; the current ``e_value`` may have fallen
    since)."""

    @property
    def decided(self) -> str | None:
        """'candidate better' / 'candidate worse' once the sequence excludes 0, else None."""
        if self.low > 0:
            return "candidate better"
        if self.high < 0:
            return "candidate worse"
        return None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "estimate": self.estimate,
            "cs": [self.low, self.high],
            "pairs": self.pairs,
            "e_value_no_difference": self.e_value,
            "e_value_max_no_difference": self.e_value_max,
            "threshold": 1 / (1 - self.confidence),
            "confidence": self.confidence,
            "method": "betting confidence sequence (Waudby-Smith & Ramdas 2024), hedged",
            "decided": self.decided,
        }


def _bets(x: FloatArray, alpha: float) -> FloatArray:
    """Predictable plug-in bets: lambda_t uses x_1..x_{t-1} only."""
    t = np.arange(1, len(x) + 1, dtype=float)
    mean_hat = np.concatenate([[0.5], (0.5 + np.cumsum(x)) / (t + 1)])  # mu-hat_0 .. mu-hat_t
    squares = np.cumsum((x - mean_hat[1:]) ** 2)
    var_hat = np.concatenate([[0.25], (0.25 + squares) / (t + 1)])[:-1]  # sigma-hat^2_{t-1}
    return np.asarray(np.sqrt(2 * math.log(2 / alpha) / (var_hat * t * np.log(1 + t))), dtype=float)


def log_capital(x: FloatArray, m: FloatArray, alpha: float) -> FloatArray:
    """log K_t(m) for every t (rows) and every hypothesised mean m (columns) of x in [0, 1]."""
    return np.concatenate(list(_log_capital_blocks(x, m, alpha)), axis=0)


def _log_capital_blocks(
    x: FloatArray, m: FloatArray, alpha: float, size: int = 512
) -> Iterator[FloatArray]:
    """log K_t(m), ``size`` rows at a time (memory stays size x len(m))."""
    bets = _bets(x, alpha)
    grid = m[None, :]
    carry_up = np.zeros((1, len(m)))
    carry_down = np.zeros((1, len(m)))
    for start in range(0, len(x), size):
        lam = bets[start : start + size, None]
        centred = x[start : start + size, None] - grid
        log_up = carry_up + np.cumsum(np.log1p(np.minimum(lam, BET_CAP / grid) * centred), axis=0)
        log_down = carry_down + np.cumsum(
            np.log1p(-np.minimum(lam, BET_CAP / (1 - grid)) * centred), axis=0
        )
        carry_up, carry_down = log_up[-1:], log_down[-1:]
        yield np.asarray(np.logaddexp(log_up, log_down) - math.log(2), dtype=float)


def confidence_sequence(
    differences: Sequence[float] | FloatArray, *, confidence: float = 0.95
) -> ConfidenceSequence:
    """The running-intersection confidence sequence for the mean of ``differences`` in
    [-1, 1] (candidate minus baseline per pair, in the order the pairs finished)."""
    d = np.asarray(differences, dtype=float)
    if not len(d):
        raise ValueError("no pairs yet")
    if np.any((d < -1) | (d > 1)):
        raise ValueError("paired differences must lie in [-1, 1]")
    alpha = 1 - confidence
    x = (d + 1) / 2
    grid = np.linspace(0, 1, GRID)[1:-1]
    grid = np.union1d(grid, [0.5])
    threshold = math.log(1 / alpha)
    excluded = np.zeros(len(grid), dtype=bool)
    for block in _log_capital_blocks(x, grid, alpha):
        excluded |= (block >= threshold).any(axis=0)
    kept = grid[~excluded]
    if len(kept):
        low, high = 2 * float(kept.min()) - 1, 2 * float(kept.max()) - 1
    else:  # every m rejected: the CS has shrunk below the grid; report the point
        low = high = float(d.mean())
    half = int(np.searchsorted(grid, 0.5))
    path = log_capital(x, grid[half : half + 1], alpha)[:, 0]
    e_value, e_max = float(np.exp(path[-1])), float(np.exp(path.max()))
    return ConfidenceSequence(float(d.mean()), low, high, len(d), e_value, confidence, e_max)


def stopping_times(differences: FloatArray, *, confidence: float = 0.95) -> npt.NDArray[np.int64]:
    """For each row of ``differences`` (simulations x pairs), the first pair count at which the
    sequence excludes 0 (the e-process at no difference reaches 1/alpha), or 0 if never."""
    alpha = 1 - confidence
    x = (np.asarray(differences, dtype=float) + 1) / 2
    result = np.zeros(len(x), dtype=np.int64)
    for row, series in enumerate(x):
        logk = log_capital(series, np.array([0.5]), alpha)[:, 0]
        hits = np.flatnonzero(logk >= math.log(1 / alpha))
        result[row] = hits[0] + 1 if len(hits) else 0
    return result
