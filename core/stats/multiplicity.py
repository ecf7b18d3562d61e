"""Adjusted p-values for many comparisons (one per task type): Holm and Benjamini-Hochberg."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import false_discovery_control


def _check(p_values: Sequence[float]) -> np.ndarray:
    values = np.asarray(p_values, dtype=float)
    if values.ndim != 1 or np.any((values < 0) | (values > 1)) or np.any(np.isnan(values)):
        raise ValueError(f"p-values must be numbers in [0, 1], got {list(p_values)}")
    return values


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values (family-wise error control)."""
    values = _check(p_values)
    m = len(values)
    if m == 0:
        return []
    order = np.argsort(values, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * values[index]))
        adjusted[index] = running
    return [float(v) for v in adjusted]


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg (1995) adjusted p-values (false discovery rate), via scipy."""
    values = _check(p_values)
    if len(values) == 0:
        return []
    return [float(v) for v in false_discovery_control(values, method="bh")]
