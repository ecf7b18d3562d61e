"""Non-inferiority and equivalence with a stated margin, from the verdict's own family.

* paired: Tango's (1998) score statistic at the margin (his NI test);
* independent: Farrington & Manning's (1990) score test (restricted MLEs under the margin) with
  Miettinen & Nurminen's N / (N - 1) variance factor -- the statistic the verdict's MN interval
  inverts, so the margin's answer and that interval cannot disagree;
* tasks repeating: the CR2 t statistic at the margin.

Non-inferior when the one-sided p at -margin is below alpha/2, which is exactly "the two-sided
interval's lower limit lies above -margin"; equivalent (TOST) when both one-sided p-values at
-margin and +margin are below alpha/2, i.e. the interval lies within (-margin, +margin).
"""

from __future__ import annotations

from typing import Any

from scipy.stats import norm
from scipy.stats import t as student_t

from . import paired, proportions
from .cluster_robust import RobustEstimate
from .paired import PairedTable


def _result(p_low: float, p_high: float, margin: float, alpha: float, test: str) -> dict[str, Any]:
    return {
        "margin": margin,
        "test": test,
        "p_noninferiority": p_low,
        "noninferior": p_low < alpha / 2,
        "p_equivalence": max(p_low, p_high),
        "equivalent": max(p_low, p_high) < alpha / 2,
    }


def _one_sided(z_low: float, z_high: float) -> tuple[float, float]:
    """P-values of H0: diff <= -margin (z_low large rejects) and H0: diff >= +margin."""
    return float(norm.sf(z_low)), float(norm.cdf(z_high))


def paired_margin(table: PairedTable, margin: float, *, confidence: float) -> dict[str, Any]:
    """Tango's score tests at -margin and +margin."""
    score = paired.tango_score(table)
    p_low, p_high = _one_sided(score(-margin), score(margin))
    return _result(p_low, p_high, margin, 1 - confidence, "Tango score at the margin")


def independent_margin(
    candidate: tuple[int, int], baseline: tuple[int, int], margin: float, *, confidence: float
) -> dict[str, Any]:
    """Miettinen-Nurminen (Farrington-Manning) score tests at -margin and +margin."""
    (x1, n1), (x2, n2) = candidate, baseline
    score = proportions.mn_score(x1, n1, x2, n2)
    p_low, p_high = _one_sided(score(-margin), score(margin))
    return _result(p_low, p_high, margin, 1 - confidence, "Miettinen-Nurminen score at the margin")


def clustered_margin(robust: RobustEstimate, margin: float) -> dict[str, Any]:
    """CR2 t tests at -margin and +margin (t on the estimate's df)."""
    if robust.se == 0:
        inside = -margin < robust.estimate < margin
        p_low = 0.0 if robust.estimate > -margin else 1.0
        return _result(p_low, 0.0 if inside else 1.0, margin, 1 - robust.confidence, "CR2 t")
    t_low = (robust.estimate + margin) / robust.se
    t_high = (robust.estimate - margin) / robust.se
    p_low = float(student_t.sf(t_low, robust.df))
    p_high = float(student_t.cdf(t_high, robust.df))
    return _result(p_low, p_high, margin, 1 - robust.confidence, f"CR2 t ({robust.df} df)")
