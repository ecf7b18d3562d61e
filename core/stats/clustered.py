"""Runs that repeat a task instance are clustered: resample tasks, not runs.

* :func:`cluster_bootstrap` -- a BCa bootstrap (scipy) of a ratio statistic over clusters.
* :func:`mean_interval` -- a process metric's mean with a cluster-bootstrap interval.
* :func:`pass_hat_k` -- pass^k (Yao et al. 2024, tau-bench): the chance that k independent
  trials of the same task all succeed, estimated without bias per task as C(c, k) / C(n, k).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

import numpy as np
from scipy.stats import bootstrap

from .results import Interval

RESAMPLES = 2000
BCA_MAX_CLUSTERS = 500
"""BCa's jackknife costs memory quadratic in the clusters; beyond this, percentile intervals."""
BATCH = 100


def _clusters(keys: Sequence[str], values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums and counts, clusters in sorted key order."""
    if len(keys) != len(values):
        raise ValueError("keys and values must have the same length")
    ids: dict[str, int] = {}
    index = [ids.setdefault(key, len(ids)) for key in keys]  # a dict beats sorting strings
    order = np.argsort(np.array(list(ids), dtype=object))
    sums = np.bincount(index, weights=np.asarray(values, dtype=float), minlength=len(ids))
    counts = np.bincount(index, minlength=len(ids)).astype(float)
    return sums[order], counts[order]


def cluster_bootstrap(
    keys: Sequence[str],
    values: Sequence[float],
    *,
    method: str,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """The mean of ``values`` with a bootstrap interval that resamples whole clusters."""
    if not values:
        raise ValueError("no values to summarise")
    sums, counts = _clusters(keys, values)
    estimate = float(sums.sum() / counts.sum())
    if len(sums) < 2 or np.all(sums / counts == estimate):
        return Interval(estimate, estimate, estimate, method, len(values), confidence)
    kind = "percentile" if len(sums) > BCA_MAX_CLUSTERS else "BCa"
    low, high = _bootstrap(sums, counts, kind, confidence, seed)
    if not (np.isfinite(low) and np.isfinite(high)):  # degenerate BCa: fall back to percentile
        kind = "percentile"
        low, high = _bootstrap(sums, counts, kind, confidence, seed)
    method = method.replace("BCa", kind)
    return Interval(estimate, float(low), float(high), method, len(values), confidence)


def _bootstrap(
    sums: np.ndarray, counts: np.ndarray, kind: str, confidence: float, seed: int
) -> tuple[float, float]:
    """The ratio-of-sums interval over resampled clusters (scipy)."""
    result = bootstrap(
        (sums, counts),
        lambda s, c, axis: s.sum(axis=axis) / c.sum(axis=axis),
        paired=True,
        vectorized=True,
        confidence_level=confidence,
        n_resamples=RESAMPLES,
        batch=BATCH,
        method=kind,
        random_state=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return float(low), float(high)


def mean_interval(
    keys: Sequence[str], values: Sequence[float], *, confidence: float = 0.95
) -> Interval:
    """A process metric's mean per run, cluster-bootstrapped by task instance."""
    return cluster_bootstrap(
        keys, values, method="cluster bootstrap (BCa) by task instance", confidence=confidence
    )


def pass_hat_k(successes: Sequence[int], trials: Sequence[int], k: int) -> float | None:
    """Mean over tasks of C(c, k) / C(n, k); tasks with fewer than k trials are skipped."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    values = [comb(c, k) / comb(n, k) for c, n in zip(successes, trials, strict=True) if n >= k]
    return sum(values) / len(values) if values else None
