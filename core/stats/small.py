"""Small samples answered exactly or not at all, and differences kept inside [-100, +100] points.

When runs repeat task instances the task instance is the unit, and the CR2 t interval rests on
the number of task instances G, not on the runs:

* **Too few task instances.** Below :data:`MIN_TASK_INSTANCES` (6) there is no verdict: with
  G task instances even an exact task-level test (flipping the sign of each task instance's
  difference, 2^G equally likely arrangements under no difference) cannot give a two-sided
  p-value below 2 / 2^G, which is 0.0625 at G = 5 and 0.031 at G = 6. The report refuses and
  says how many are needed; it never treats the runs as independent instead.
* **Degenerate variance.** When every run of each version agrees (all complete, all fail), the
  CR2 variance is 0 and its interval would have no width. Then each task instance counts as one
  trial (a task instance whose runs all completed is one success): Clopper-Pearson per version
  at 1 - alpha/2 each, their difference by Bonferroni -- exact and conservative (runs of a task
  that agree carry at most one trial of information). When the variance is 0 for any other
  reason (every task instance has the same rate) nothing estimates it: "no information".
* **Few task instances: pseudo task instances.** Below :data:`ADJUSTED_BELOW` (20) task
  instances a CR2 t interval under-covers when the task instances' effects are skewed (as low
  as 91% at 95% nominal, by exact enumeration over 6-10 task instances). The fit then adds four
  pseudo task instances, one per cell of the paired outcome table (baseline, candidate) in
  {(1, 1), (1, 0), (0, 1), (0, 0)}, each counting half a typical task instance: Agresti & Min's
  (2005) "add 0.5 to each cell" for matched pairs and Agresti & Caffo's (2000) "one success and
  one failure per group" for independent ones, moved from runs to task instances. The
  interval, the t test (on the real task instances' degrees of freedom) and so the verdict all
  come from that one adjusted fit; the estimate shown stays the observed difference. A
  version's own rate gets the same pseudo task instances seen from one side: one task instance
  that always completes and one that never does (:func:`.clustered.cr2_ratio_interval`).
* **Bounded.** A CR2 interval is intersected with [-1, +1], the range a difference of two
  proportions can take: the truth always lies there, so coverage is unchanged.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt
from scipy.optimize import brentq
from scipy.stats import beta

from .cluster_robust import FloatArray, RobustEstimate, robust_estimate
from .results import Interval, TestResult

MIN_TASK_INSTANCES = 6
"""The fewest task instances a comparison whose runs repeat tasks answers (see the module)."""

DEGENERATE_SE = 1e-9
"""A CR2 standard error below this (on a 0-1 scale) is no variance at all (rounding noise)."""

ADJUSTED_BELOW = 20
"""Fewer task instances than this: the CR2 fit carries the pseudo task instances (see the
module); the same threshold below which a rate's interval is CR2 rather than a bootstrap."""

PSEUDO_CELLS = ((1.0, 1.0), (1.0, 0.0), (0.0, 1.0), (0.0, 0.0))
"""The pseudo task instances' outcomes (baseline, candidate): one per cell of the paired table."""
PSEUDO_COPIES = 0.5
"""Each pseudo task instance counts this many typical task instances (0.5 per cell)."""
PSEUDO_NOTE = "4 pseudo task instances (0.5 per paired cell)"

TOO_FEW = "too few task instances"
NO_INFORMATION = "no information"


def best_task_level_p(tasks: int) -> float:
    """The smallest two-sided p-value a sign-flip test over ``tasks`` task instances can give."""
    return min(1.0, 2.0 / 2.0**tasks)


def too_few_reason(tasks: int) -> str:
    """Why a design with ``tasks`` task instances gets no verdict, and how many it needs."""
    return (
        f"{tasks} task instance{'' if tasks == 1 else 's'}: runs that repeat tasks need at "
        f"least {MIN_TASK_INSTANCES} (with {tasks}, even an exact task-level test cannot give "
        f"p below {best_task_level_p(tasks):.3g}); run {MIN_TASK_INSTANCES - tasks} more task "
        "instance" + ("" if MIN_TASK_INSTANCES - tasks == 1 else "s")
    )


def no_information(estimate: float, n: int, confidence: float, why: str) -> Interval:
    """The interval that says nothing: the whole range [-1, +1]."""
    return Interval(estimate, -1.0, 1.0, f"no information ({why})", n, confidence)


def bounded(robust: RobustEstimate) -> RobustEstimate:
    """``robust`` with its interval intersected with [-1, +1] (said in its method when cut)."""
    low, high = max(robust.low, -1.0), min(robust.high, 1.0)
    if (low, high) == (robust.low, robust.high):
        return robust
    return replace(robust, low=low, high=high, method=robust.method + ", cut to [-100, +100] pts")


def _clopper_pearson(x: int, n: int, alpha: float) -> tuple[float, float]:
    low = 0.0 if x == 0 else float(beta.ppf(alpha / 2, x, n - x + 1))
    high = 1.0 if x == n else float(beta.ppf(1 - alpha / 2, x + 1, n - x))
    return low, high


def _bonferroni(x1: int, n1: int, x2: int, n2: int, alpha: float) -> tuple[float, float]:
    low1, high1 = _clopper_pearson(x1, n1, alpha / 2)
    low2, high2 = _clopper_pearson(x2, n2, alpha / 2)
    return low1 - high2, high1 - low2


def task_level_exact(
    candidate: tuple[int, int], baseline: tuple[int, int], *, confidence: float
) -> tuple[Interval, TestResult]:
    """Candidate minus baseline with each task instance one trial (``(successes, task
    instances)`` per version): Clopper-Pearson at 1 - alpha/2 per version, Bonferroni for the
    difference. The p-value is the smallest alpha whose interval excludes 0 (the test the
    interval inverts, so the two never disagree)."""
    (x1, n1), (x2, n2) = candidate, baseline
    alpha = 1 - confidence
    low, high = _bonferroni(x1, n1, x2, n2, alpha)
    estimate = x1 / n1 - x2 / n2

    def gap(a: float) -> float:
        lo, hi = _bonferroni(x1, n1, x2, n2, a)
        return lo if estimate > 0 else -hi

    if estimate == 0 or gap(1 - 1e-12) <= 0:
        p_value = 1.0
    elif gap(1e-15) > 0:
        p_value = 1e-15
    else:
        p_value = float(brentq(gap, 1e-15, 1 - 1e-12, xtol=1e-14))
    method = "exact per task instance (Clopper-Pearson, Bonferroni)"
    interval = Interval(estimate, low, high, method, n1 + n2, confidence)
    return interval, TestResult(None, p_value, "exact per task instance")


def _runs_per_task(n: int, codes: npt.NDArray[np.intp]) -> float:
    return n / len(np.unique(codes)) if n else 1.0


def adjusted_mean(
    diffs: FloatArray, codes: npt.NDArray[np.intp], *, confidence: float
) -> RobustEstimate:
    """The mean paired difference (candidate minus baseline, each 0/1) clustered by ``codes``,
    with the pseudo task instances (see the module): CR2, t on G - 1 df of the real ones."""
    y = np.asarray(diffs, dtype=float)
    real = np.unique(np.asarray(codes), return_inverse=True)[1].reshape(-1).astype(np.intp)
    groups = int(real.max()) + 1
    pseudo_y = np.array([c - b for b, c in PSEUDO_CELLS])
    size = _runs_per_task(len(y), real)
    robust = robust_estimate(
        np.ones((len(y) + len(PSEUDO_CELLS), 1)),
        np.r_[y, pseudo_y],
        np.r_[real, groups + np.arange(len(PSEUDO_CELLS))].astype(np.intp),
        coefficient=0,
        confidence=confidence,
        method="",
        weights=np.r_[np.ones(len(y)), np.full(len(PSEUDO_CELLS), size)],
        copies=np.r_[np.ones(groups), np.full(len(PSEUDO_CELLS), PSEUDO_COPIES)],
        df=groups - 1,
    )
    return _as_observed(robust, float(y.mean()), groups, len(y), "t on G-1 df")


def adjusted_difference(
    values: FloatArray,
    is_candidate: npt.NDArray[np.bool_],
    codes: npt.NDArray[np.intp],
    *,
    confidence: float,
    strata: npt.NDArray[np.intp] | None = None,
) -> RobustEstimate:
    """Candidate minus baseline (runs 0/1, clustered by ``codes``; within ``strata`` when
    given, the pseudo task instances then forming a stratum of their own), with the pseudo task
    instances (see the module): CR2, t on G - p df of the real task instances and coefficients.
    Each pseudo task instance holds one run of each version, weighing as many runs as a
    typical task instance of that version has."""
    y = np.asarray(values, dtype=float)
    cand = np.asarray(is_candidate, dtype=bool)
    real = np.unique(np.asarray(codes), return_inverse=True)[1].reshape(-1).astype(np.intp)
    groups = int(real.max()) + 1
    k = len(PSEUDO_CELLS)
    sizes = [_runs_per_task(int(np.sum(cand == side)), real[cand == side]) for side in (0, 1)]
    pseudo_cand = np.tile([False, True], k)
    pseudo_y = np.array([cell[side] for cell in PSEUDO_CELLS for side in (0, 1)])
    all_cand = np.r_[cand, pseudo_cand].astype(float)
    if strata is None:
        x = np.column_stack([np.ones(len(all_cand)), all_cand])
        coefficient, p, raw = 1, 2, float(y[cand].mean() - y[~cand].mean())
    else:
        levels = np.unique(np.asarray(strata), return_inverse=True)[1].reshape(-1)
        p = int(levels.max()) + 2
        dummies = np.eye(p)[np.r_[levels, np.full(2 * k, p - 1)]]
        x = np.column_stack([all_cand, dummies])
        coefficient, raw = 0, _within(y, cand, levels)
    robust = robust_estimate(
        x,
        np.r_[y, pseudo_y],
        np.r_[real, groups + np.repeat(np.arange(k), 2)].astype(np.intp),
        coefficient=coefficient,
        confidence=confidence,
        method="",
        weights=np.r_[np.ones(len(y)), np.tile(sizes, k)],
        copies=np.r_[np.ones(groups), np.full(k, PSEUDO_COPIES)],
        df=groups - p,
    )
    return _as_observed(robust, raw, groups, len(y), "t on G-p df")


def _within(y: FloatArray, cand: npt.NDArray[np.bool_], levels: npt.NDArray[np.intp]) -> float:
    """The OLS candidate coefficient with one intercept per stratum (the observed estimate)."""
    x = np.column_stack([cand.astype(float), np.eye(int(levels.max()) + 1)[levels]])
    return float(np.linalg.lstsq(x, y, rcond=None)[0][0])


def _as_observed(
    robust: RobustEstimate, observed: float, groups: int, n: int, df_text: str
) -> RobustEstimate:
    """The adjusted fit's interval and test, reported with the observed estimate and the real
    task instances and runs."""
    method = f"CR2 cluster-robust with {PSEUDO_NOTE}, {df_text}"
    return replace(robust, estimate=observed, clusters=groups, n=n, method=method)
