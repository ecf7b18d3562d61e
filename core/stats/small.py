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
* **Bounded.** A CR2 interval is intersected with [-1, +1], the range a difference of two
  proportions can take: the truth always lies there, so coverage is unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from scipy.optimize import brentq
from scipy.stats import beta

from .cluster_robust import RobustEstimate
from .results import Interval, TestResult

MIN_TASK_INSTANCES = 6
"""The fewest task instances a comparison whose runs repeat tasks answers (see the module)."""

DEGENERATE_SE = 1e-9
"""A CR2 standard error below this (on a 0-1 scale) is no variance at all (rounding noise)."""

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
