"""Runs that repeat a task instance are clustered: resample tasks, not runs.

* :class:`Clusters` -- which cluster each observation belongs to, worked out once and reused for
  every metric of the same runs.
* :func:`cluster_bootstrap` -- a BCa bootstrap (scipy) of a ratio statistic over clusters;
  :func:`ratio_interval` is the same from per-cluster totals.
* :func:`mean_interval` -- a process metric's mean with a cluster-bootstrap interval.
* Below :data:`MIN_BOOTSTRAP_CLUSTERS` task instances a bootstrap under-covers (a resample of
  4-8 clusters takes few distinct values; coverage 82-89% was measured), so the interval is the
  CR2 cluster-robust one with t on G-1 df instead (:func:`cr2_ratio_interval`).
* :func:`pass_hat_k` -- pass^k (Yao et al. 2024, tau-bench): the chance that k independent
  trials of the same task all succeed, estimated without bias per task as C(c, k) / C(n, k).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from math import comb
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.stats import bootstrap
from scipy.stats import t as student_t

from .results import Interval

RESAMPLES = 2000
BCA_MAX_CLUSTERS = 500
"""BCa's jackknife costs memory quadratic in the clusters; beyond this, percentile intervals."""
BATCH = 100
MIN_BOOTSTRAP_CLUSTERS = 20
"""Fewer task instances than this: CR2 t interval, not a bootstrap."""

FloatArray = npt.NDArray[np.float64]
Values = Sequence[float] | npt.NDArray[np.float64] | npt.NDArray[np.int64] | npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Clusters:
    """The cluster (e.g. task instance) of each observation.

    ``codes`` numbers the clusters by first appearance; ``order`` lists them in sorted key order,
    the order the bootstrap sees them in, so intervals do not depend on the order of the rows.
    """

    codes: npt.NDArray[np.intp]
    keys: tuple[str, ...]
    order: npt.NDArray[np.intp]

    @classmethod
    def of(cls, keys: Iterable[str]) -> Clusters:
        """Number the clusters of ``keys`` (one key per observation)."""
        ids: dict[str, int] = {}
        codes = [ids.setdefault(key, len(ids)) for key in keys]  # a dict beats sorting strings
        order = np.argsort(np.array(list(ids), dtype=object))
        return cls(np.asarray(codes, dtype=np.intp), tuple(ids), order.astype(np.intp))

    @classmethod
    def of_ids(cls, ids: npt.NDArray[np.intp], names: Sequence[str]) -> Clusters:
        """Like :meth:`of`, for observations whose keys are numbered already: ``names[ids[i]]``
        is observation i's key (one id per distinct key; ids of absent keys are skipped)."""
        present, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        appearance = np.argsort(first)  # the present ids in order of first appearance
        code_of = np.empty(len(present), dtype=np.intp)
        code_of[appearance] = np.arange(len(present))
        keys = tuple(names[i] for i in present[appearance].tolist())
        order = np.argsort(np.array(keys, dtype=object))
        return cls(code_of[inverse.reshape(-1)], keys, order.astype(np.intp))

    def __len__(self) -> int:
        """Number of clusters."""
        return len(self.keys)

    def totals(self, values: Values) -> tuple[FloatArray, FloatArray]:
        """Per-cluster sums of ``values`` and observation counts, in sorted key order."""
        weights = np.asarray(values, dtype=float)
        if len(weights) != len(self.codes):
            raise ValueError("keys and values must have the same length")
        sums = np.bincount(self.codes, weights=weights, minlength=len(self)).astype(float)
        counts = np.bincount(self.codes, minlength=len(self)).astype(float)
        return sums[self.order], counts[self.order]

    def first_appearance_totals(self, values: Values) -> tuple[list[int], list[int]]:
        """Per-cluster integer sums of ``values`` and counts, clusters by first appearance."""
        weights = np.asarray(values, dtype=np.int64)
        if len(weights) != len(self.codes):
            raise ValueError("keys and values must have the same length")
        sums = np.bincount(self.codes, weights=weights, minlength=len(self))
        counts = np.bincount(self.codes, minlength=len(self))
        return [round(s) for s in sums.tolist()], [int(c) for c in counts.tolist()]


def cluster_bootstrap(
    keys: Sequence[str] | Clusters,
    values: Values,
    *,
    method: str,
    confidence: float = 0.95,
    seed: int = 0,
    bounded: bool = False,
) -> Interval:
    """The mean of ``values`` with a bootstrap interval that resamples whole clusters
    (CR2 t below :data:`MIN_BOOTSTRAP_CLUSTERS`; ``bounded``: a rate in [0, 1])."""
    if len(values) == 0:
        raise ValueError("no values to summarise")
    clusters = keys if isinstance(keys, Clusters) else Clusters.of(keys)
    sums, counts = clusters.totals(values)
    return ratio_interval(
        sums,
        counts,
        method=method,
        n=len(values),
        confidence=confidence,
        seed=seed,
        bounded=bounded,
    )


def ratio_interval(
    sums: FloatArray,
    counts: FloatArray,
    *,
    method: str,
    n: int,
    confidence: float = 0.95,
    seed: int = 0,
    bounded: bool = False,
    pseudo_tasks: bool | None = None,
) -> Interval:
    """``sum(sums) / sum(counts)`` with a bootstrap interval over the clusters (one per entry).

    ``n`` is the number of observations behind the totals, reported with the interval.
    ``bounded``: a rate in [0, 1]. ``pseudo_tasks`` (default: ``bounded``): below 20 clusters
    the CR2 fit carries one task instance that always completes and one that never does --
    right for a rate over runs (or errors), not for per-step success: no task instance fails
    every step it enters, so such a pseudo task would pull the interval far from the data.
    """
    if len(sums) != len(counts) or len(sums) == 0:
        raise ValueError("need one sum and one count per cluster, and at least one cluster")
    estimate = float(sums.sum() / counts.sum())
    if len(sums) < 2 or np.all(sums / counts == estimate):
        return Interval(estimate, estimate, estimate, method, n, confidence)
    if len(sums) < MIN_BOOTSTRAP_CLUSTERS:
        return cr2_ratio_interval(
            sums,
            counts,
            n=n,
            confidence=confidence,
            bounded=bounded,
            pseudo_tasks=pseudo_tasks,
        )
    kind = "percentile" if len(sums) > BCA_MAX_CLUSTERS else "BCa"
    low, high = _bootstrap(sums, counts, kind, confidence, seed)
    if not (np.isfinite(low) and np.isfinite(high)):  # degenerate BCa: fall back to percentile
        kind = "percentile"
        low, high = _bootstrap(sums, counts, kind, confidence, seed)
    method = method.replace("BCa", kind)
    return Interval(estimate, float(low), float(high), method, n, confidence)


def cr2_ratio_interval(
    sums: FloatArray,
    counts: FloatArray,
    *,
    n: int,
    confidence: float = 0.95,
    bounded: bool = False,
    pseudo_tasks: bool | None = None,
) -> Interval:
    """``sum(sums) / sum(counts)`` with the CR2 variance (Bell & McCaffrey 2002) and t on G-1.

    With per-observation rows this is the intercept-only CR2 of
    :mod:`.cluster_robust`: V = sum_g (s_g - R m_g)^2 / (1 - m_g / M) / M^2. When the ratio is a
    rate (``bounded``), the fit carries :mod:`.small`'s pseudo task instances seen from one
    version -- one task instance that always completes and one that never does, each of the
    mean size -- and the limits are kept within [0, 1]; the estimate stays the observed rate.
    ``pseudo_tasks=False`` keeps the cut to [0, 1] without them (per-step success).
    """
    if pseudo_tasks is None:
        pseudo_tasks = bounded
    total = float(counts.sum())
    estimate = float(sums.sum() / total)
    groups = len(sums)
    copies = np.ones(groups)
    if pseudo_tasks:
        size = total / groups
        sums, counts = np.r_[sums, size, 0.0], np.r_[counts, size, size]
        copies = np.r_[copies, 1.0, 1.0]
        total = float((counts * copies).sum())
    centre = float((sums * copies).sum() / total)
    residual = sums - centre * counts
    leverage = np.clip(1 - counts / total, 1e-12, None)
    se = float(np.sqrt(np.sum(copies * residual**2 / leverage)) / total)
    quantile = float(student_t.ppf(1 - (1 - confidence) / 2, groups - 1))
    low, high = centre - quantile * se, centre + quantile * se
    method = f"CR2 cluster-robust t ({groups - 1} df) by task instance; < 20 tasks, no bootstrap"
    if bounded:
        low, high = max(low, 0.0), min(high, 1.0)
    if pseudo_tasks:
        method += "; 2 pseudo task instances (one completed, one failed)"
    return Interval(estimate, low, high, method, n, confidence)


def _bootstrap(
    sums: FloatArray, counts: FloatArray, kind: str, confidence: float, seed: int
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
    keys: Sequence[str] | Clusters, values: Values, *, confidence: float = 0.95
) -> Interval:
    """A process metric's mean per run, cluster-bootstrapped by task instance (the CR2 t below
    20 tasks). A mean of non-negative values (tokens, cost, retries) keeps its lower limit at 0
    or above: a t interval over few tasks can reach below what the data can take."""
    interval = cluster_bootstrap(
        keys, values, method="cluster bootstrap (BCa) by task instance", confidence=confidence
    )
    if interval.low < 0 <= float(np.min(values)):
        interval = replace(interval, low=0.0)
    return interval


def pass_hat_k(successes: Sequence[int], trials: Sequence[int], k: int) -> float | None:
    """Mean over tasks of C(c, k) / C(n, k); tasks with fewer than k trials are skipped."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    values = [comb(c, k) / comb(n, k) for c, n in zip(successes, trials, strict=True) if n >= k]
    return sum(values) / len(values) if values else None


PASS_K = (1, 2, 4, 8)
MIN_PASS_K_TASKS = 5
"""pass^k for a k is reported only if at least this many tasks were run k times or more."""


def pass_k_curve(
    successes: Sequence[int],
    trials: Sequence[int],
    *,
    ks: Sequence[int] = PASS_K,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """pass^k for every k on ONE task set, so the curve cannot rise with k.

    The set is the tasks run at least ``k_max`` times, ``k_max`` the largest k that at least
    :data:`MIN_PASS_K_TASKS` tasks reach (each task's C(c, k) / C(n, k) falls with k, hence
    so does their mean). Intervals resample tasks (percentile bootstrap) from 20 tasks, below
    that a t interval over the per-task values (a bootstrap of few tasks under-covers).
    pass^1 here is task-weighted: the mean of each task's completion rate, which differs from
    the run-weighted completion rate when tasks ran different numbers of times.
    """
    c = np.asarray(successes, dtype=np.int64)
    n = np.asarray(trials, dtype=np.int64)
    reachable = [k for k in ks if np.count_nonzero(n >= k) >= min(MIN_PASS_K_TASKS, len(n))]
    if not len(n) or not reachable:
        return {"tasks": 0, "min_runs_per_task": None, "values": {}}
    k_max = max(reachable)
    keep = n >= k_max
    c, n = c[keep], n[keep]
    values: dict[str, Any] = {}
    for k in (k for k in ks if k <= k_max):
        per_task = np.array(
            [comb(int(ci), k) / comb(int(ni), k) for ci, ni in zip(c, n, strict=True)]
        )
        values[str(k)] = _mean_of_tasks(per_task, confidence, seed).as_dict()
    return {
        "tasks": int(keep.sum()),
        "min_runs_per_task": k_max,
        "values": values,
        "note": "task-weighted over one task set: pass^1 is the mean per-task completion rate",
    }


def _mean_of_tasks(per_task: FloatArray, confidence: float, seed: int) -> Interval:
    """The mean of per-task values with an interval over tasks."""
    g = len(per_task)
    estimate = float(per_task.mean())
    if g < 2 or np.all(per_task == estimate):
        return Interval(estimate, estimate, estimate, "no variation between tasks", g, confidence)
    if g < MIN_BOOTSTRAP_CLUSTERS:
        se = float(per_task.std(ddof=1) / np.sqrt(g))
        q = float(student_t.ppf(1 - (1 - confidence) / 2, g - 1))
        low, high = max(estimate - q * se, 0.0), min(estimate + q * se, 1.0)
        return Interval(estimate, low, high, f"t over tasks ({g - 1} df)", g, confidence)
    result = bootstrap(
        (per_task,),
        np.mean,
        confidence_level=confidence,
        n_resamples=RESAMPLES,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return Interval(estimate, float(low), float(high), "task bootstrap (percentile)", g, confidence)
