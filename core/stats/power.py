"""How many runs a decision needs: power and minimum detectable differences.

Independent groups use the normal approximation with the pooled variance under H0 and the
separate variances under H1 (Fleiss, Levin & Paik 2003; R's ``power.prop.test``). Paired designs
use Connor's (1987) formula for McNemar's test, driven by the discordance rate. When runs
repeat a task instance, the effective sample is n / design effect (Kish 1965): runs needed are
multiplied by it and detectable differences are computed at n / deff.
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import norm


def _z(alpha: float, power: float) -> tuple[float, float]:
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    return float(norm.ppf(1 - alpha / 2)), float(norm.ppf(power))


def runs_per_group(p1: float, p2: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Runs per version to detect ``p1`` vs ``p2`` with a two-sided test."""
    if p1 == p2 or not (0 <= p1 <= 1 and 0 <= p2 <= 1):
        raise ValueError(f"need two different rates between 0 and 1, got {p1}, {p2}")
    z_a, z_b = _z(alpha, power)
    pooled = (p1 + p2) / 2
    top = z_a * math.sqrt(2 * pooled * (1 - pooled)) + z_b * math.sqrt(
        p1 * (1 - p1) + p2 * (1 - p2)
    )
    return (top / abs(p1 - p2)) ** 2


def power_per_group(n: float, p1: float, p2: float, *, alpha: float = 0.05) -> float:
    """Power of the two-sided test with ``n`` runs per version (one tail, as R does)."""
    z_a = float(norm.ppf(1 - alpha / 2))
    pooled = (p1 + p2) / 2
    spread = math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return float(
        norm.cdf(
            (math.sqrt(n) * abs(p1 - p2) - z_a * math.sqrt(2 * pooled * (1 - pooled))) / spread
        )
    )


def detectable_difference(n: float, p: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest improvement over rate ``p`` that ``n`` runs per version detect (1 - p when
    even a perfect candidate would not be detected). At ``p == 1`` nothing can improve: the
    smallest detectable drop is returned instead (the power formula is symmetric in p, 1 - p)."""
    if n <= 1 or not (0 <= p <= 1):
        raise ValueError(f"need n > 1 and 0 <= p <= 1, got n={n}, p={p}")
    if p == 1:
        return detectable_difference(n, 0.0, alpha=alpha, power=power)
    if power_per_group(n, p, 1 - 1e-9, alpha=alpha) < power:
        return 1 - p
    return float(
        brentq(lambda d: power_per_group(n, p, p + d, alpha=alpha) - power, 1e-9, 1 - p - 1e-9)
    )


def pairs_needed(
    difference: float, discordance: float, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """Pairs for McNemar's test (Connor 1987): ``discordance`` = P(the versions disagree)."""
    if not (0 < abs(difference) <= discordance <= 1):
        raise ValueError(
            f"need 0 < |difference| <= discordance <= 1, got {difference}, {discordance}"
        )
    z_a, z_b = _z(alpha, power)
    top = z_a * math.sqrt(discordance) + z_b * math.sqrt(discordance - difference**2)
    return (top / difference) ** 2


def detectable_paired_difference(
    pairs: float, discordance: float, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The smallest paired difference ``pairs`` pairs detect at this discordance rate."""
    if pairs <= 1 or not (0 < discordance <= 1):
        raise ValueError(f"need pairs > 1 and 0 < discordance <= 1, got {pairs}, {discordance}")
    if pairs_needed(discordance, discordance, alpha=alpha, power=power) > pairs:
        return discordance
    return float(
        brentq(
            lambda d: pairs_needed(d, discordance, alpha=alpha, power=power) - pairs,
            1e-9,
            discordance,
        )
    )
