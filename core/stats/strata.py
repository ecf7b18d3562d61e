"""Stratified 2x2 tables (one per scenario): pool only when the strata agree.

* Mantel-Haenszel pooled odds ratio with the Robins-Breslow-Greenland (1986) variance of its log;
* the Cochran-Mantel-Haenszel test of no association (no continuity correction);
* the Breslow-Day test of a common odds ratio with Tarone's (1985) correction (K - 1 df).

Each stratum is (candidate completed, candidate runs, baseline completed, baseline runs).
Strata with no runs on one side, or where every run agrees, carry no information and are left
out of the sums (as statsmodels' StratifiedTable does with zero weights).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.stats import chi2, norm

Stratum = tuple[int, int, int, int]
HOMOGENEITY_ALPHA = 0.05


@dataclass(frozen=True, slots=True)
class StratifiedResult:
    """Pooled odds ratio, CMH test and Breslow-Day-Tarone homogeneity test."""

    odds_ratio: float
    low: float
    high: float
    cmh_statistic: float
    cmh_p_value: float
    breslow_day: float | None
    breslow_day_p_value: float | None
    strata: int
    confidence: float

    @property
    def homogeneous(self) -> bool:
        """No evidence (p >= 0.05) that the strata's odds ratios differ."""
        return self.breslow_day_p_value is None or self.breslow_day_p_value >= HOMOGENEITY_ALPHA

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "mh_odds_ratio": {
                "estimate": self.odds_ratio,
                "ci": [self.low, self.high],
                "method": "Mantel-Haenszel, Robins-Breslow-Greenland variance",
            },
            "cmh": {"statistic": self.cmh_statistic, "p_value": self.cmh_p_value, "df": 1},
            "breslow_day_tarone": {
                "statistic": self.breslow_day,
                "p_value": self.breslow_day_p_value,
                "df": self.strata - 1,
            },
            "strata": self.strata,
            "homogeneous": self.homogeneous,
            "unit": "runs, as independent within each scenario (the per-scenario verdicts and "
            "the decision cluster by task instance)",
        }


def _cells(strata: Sequence[Stratum]) -> np.ndarray:
    """Rows a, b, c, d per informative stratum (a, b: candidate completed/failed)."""
    rows = []
    for x1, n1, x2, n2 in strata:
        if not (0 <= x1 <= n1 and 0 <= x2 <= n2):
            raise ValueError(f"need 0 <= completed <= runs in every stratum, got {x1, n1, x2, n2}")
        a, b, c, d = x1, n1 - x1, x2, n2 - x2
        if n1 and n2 and (a + c) and (b + d):
            rows.append((a, b, c, d))
    return np.array(rows, dtype=float).reshape(-1, 4)


def stratified(strata: Sequence[Stratum], *, confidence: float = 0.95) -> StratifiedResult:
    """MH odds ratio (candidate vs baseline completion), CMH and Breslow-Day-Tarone tests."""
    cells = _cells(strata)
    if not len(cells):
        raise ValueError("no stratum has runs of both versions with mixed outcomes")
    a, b, c, d = cells.T
    n = a + b + c + d
    r, s = a * d / n, b * c / n
    big_r, big_s = r.sum(), s.sum()
    odds = float(big_r / big_s) if big_s else math.inf
    p, q = (a + d) / n, (b + c) / n
    if big_r and big_s:
        variance = (
            (p * r).sum() / (2 * big_r**2)
            + (p * s + q * r).sum() / (2 * big_r * big_s)
            + (q * s).sum() / (2 * big_s**2)
        )
        z = float(norm.ppf(1 - (1 - confidence) / 2))
        half = z * math.sqrt(variance)
        low, high = math.exp(math.log(odds) - half), math.exp(math.log(odds) + half)
    else:
        low, high = (0.0, math.inf)
    row1, col1 = a + b, a + c
    expected = row1 * col1 / n
    var_a = row1 * (c + d) * col1 * (b + d) / (n**2 * (n - 1))
    cmh = float((a.sum() - expected.sum()) ** 2 / var_a.sum())
    bd, bd_p = _breslow_day_tarone(cells, odds) if len(cells) > 1 else (None, None)
    return StratifiedResult(
        odds, low, high, cmh, float(chi2.sf(cmh, 1)), bd, bd_p, len(cells), confidence
    )


def _breslow_day_tarone(cells: np.ndarray, odds: float) -> tuple[float | None, float | None]:
    """Breslow-Day statistic at the MH odds ratio, minus Tarone's correction (K - 1 df)."""
    if not (0 < odds < math.inf):
        return None, None
    deviations, variances = [], []
    for a, b, c, d in cells:
        row1, col1, n = a + b, a + c, a + b + c + d
        low, high = max(0.0, col1 - (n - row1)), min(row1, col1)

        def gap(x: float, row1: float = row1, col1: float = col1, n: float = n) -> float:
            return x * (n - row1 - col1 + x) - odds * (row1 - x) * (col1 - x)

        fitted = low if low == high else float(brentq(gap, low, high))
        cells_fit = (fitted, row1 - fitted, col1 - fitted, n - row1 - col1 + fitted)
        if min(cells_fit) <= 0:
            continue
        variances.append(1 / sum(1 / v for v in cells_fit))
        deviations.append(a - fitted)
    if len(deviations) < 2:
        return None, None
    dev, var = np.array(deviations), np.array(variances)
    statistic = float((dev**2 / var).sum() - dev.sum() ** 2 / var.sum())
    return statistic, float(chi2.sf(statistic, len(cells) - 1))
