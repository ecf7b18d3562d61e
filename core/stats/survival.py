"""The long-horizon view: how runs survive step after step.

A run's "time" is the number of steps it entered; it "dies" at the step it failed (or was
aborted) at, and is censored when it completed or is still going. Kaplan-Meier curves and the
logrank test come from scipy (``ecdf`` with ``CensoredData``, ``logrank``); the constant
per-step success p, its implied p^N, and a Cochran-Armitage test of a hazard that rises with the
step index (error accumulation) are written here. Runs come as :class:`StepOutcome` objects or,
for many runs, as :class:`StepOutcomes` columns (the same results, without a Python object each).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.stats import CensoredData, ecdf, logrank, norm

from .proportions import proportion
from .results import Interval, TestResult


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """One run, as survival data: steps entered, and whether it failed at the last one."""

    steps: int
    failed: bool


@dataclass(frozen=True, slots=True)
class StepOutcomes:
    """Many runs as survival data, column by column: steps entered, and whether each failed."""

    steps: npt.NDArray[np.int64]
    failed: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, outcomes: Outcomes) -> StepOutcomes:
        """Columns of ``outcomes`` (returned as they are when they already are columns)."""
        if isinstance(outcomes, StepOutcomes):
            return outcomes
        steps = np.fromiter((o.steps for o in outcomes), dtype=np.int64, count=len(outcomes))
        failed = np.fromiter((o.failed for o in outcomes), dtype=bool, count=len(outcomes))
        return cls(steps, failed)

    def __post_init__(self) -> None:
        if len(self.steps) != len(self.failed):
            raise ValueError("steps and failed must have the same length")

    def __len__(self) -> int:
        """Number of runs."""
        return len(self.steps)


Outcomes = Sequence[StepOutcome] | StepOutcomes


@dataclass(frozen=True, slots=True)
class SurvivalPoint:
    """P(a run gets past step ``step``) with its pointwise interval, and runs at risk there."""

    step: int
    survival: float
    low: float
    high: float
    at_risk: int
    failed: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return asdict(self)


def _censored(outcomes: StepOutcomes) -> CensoredData:
    failed = outcomes.steps[outcomes.failed].astype(float)
    censored = outcomes.steps[~outcomes.failed].astype(float)
    return CensoredData(uncensored=failed, right=censored)


def kaplan_meier(outcomes: Outcomes, *, confidence: float = 0.95) -> list[SurvivalPoint]:
    """The Kaplan-Meier survival curve by step, with log-log pointwise intervals."""
    if not len(outcomes):
        return []
    data = StepOutcomes.of(outcomes)
    if np.any(data.steps < 1):
        raise ValueError("every run must have entered at least one step")
    result = ecdf(_censored(data))
    last = int(data.steps.max())
    steps = np.arange(1, last + 1, dtype=float)
    survival = result.sf.evaluate(steps)
    if not data.failed.any():
        low = high = np.ones_like(steps)
    else:
        with warnings.catch_warnings():  # undefined where S(t) is 0 or 1: filled in below
            warnings.simplefilter("ignore", RuntimeWarning)
            ci = result.sf.confidence_interval(confidence_level=confidence, method="log-log")
        low = np.nan_to_num(ci.low.evaluate(steps), nan=0.0)
        high = np.nan_to_num(ci.high.evaluate(steps), nan=1.0)
    entered = np.bincount(data.steps, minlength=last + 2)
    at_risk_by_step = entered[::-1].cumsum()[::-1]  # runs that entered at least this step
    failures = np.bincount(data.steps[data.failed], minlength=last + 2)
    points = []
    for i, step in enumerate(range(1, last + 1)):
        at_risk = int(at_risk_by_step[step])
        failed = int(failures[step])
        points.append(
            SurvivalPoint(step, float(survival[i]), float(low[i]), float(high[i]), at_risk, failed)
        )
    return points


def logrank_test(a: Outcomes, b: Outcomes) -> TestResult:
    """Logrank test that two versions' step-survival curves differ (scipy)."""
    if not len(a) or not len(b):
        raise ValueError("both groups need runs")
    result = logrank(_censored(StepOutcomes.of(a)), _censored(StepOutcomes.of(b)))
    return TestResult(float(result.statistic), float(result.pvalue), "logrank")


def step_success(outcomes: Outcomes, *, confidence: float = 0.95) -> Interval:
    """A constant per-step success probability p: steps passed / steps entered (Wilson)."""
    data = StepOutcomes.of(outcomes)
    entered = int(data.steps.sum())
    failed = int(data.failed.sum())
    if entered == 0:
        raise ValueError("no steps were entered")
    interval = proportion(entered - failed, entered, confidence=confidence)
    return Interval(
        interval.estimate,
        interval.low,
        interval.high,
        "constant per-step success, Wilson",
        entered,
        confidence,
    )


def implied_completion(p: Interval, steps: int | Sequence[int] | npt.NDArray[np.int64]) -> Interval:
    """p^N: the completion rate a constant per-step success implies for an N-step task.

    With one N per run (tasks of different lengths) it is the mean of p^N over the runs; p^N
    rises with p, so the limits are the same mean at p's limits.
    """
    lengths = np.atleast_1d(np.asarray(steps, dtype=np.int64))
    if not len(lengths) or np.any(lengths < 0):
        raise ValueError("need at least one non-negative number of steps")
    low, high = int(lengths.min()), int(lengths.max())
    method = f"p^{high}" if low == high else f"mean of p^N over runs, N {low}-{high}"

    def mean_power(q: float) -> float:
        return float(np.mean(float(q) ** lengths))

    return Interval(
        mean_power(p.estimate),
        mean_power(p.low),
        mean_power(p.high),
        method,
        p.n,
        p.confidence,
    )


def cochran_armitage(
    events: Sequence[int], totals: Sequence[int], scores: Sequence[float] | None = None
) -> TestResult:
    """Cochran-Armitage test for a linear trend in proportions across ordered groups.

    Applied to per-step hazards (failures / runs at risk at each step) it tests whether the
    hazard rises with the step index: error accumulation. The statistic is the signed z.
    """
    e = np.asarray(events, float)
    n = np.asarray(totals, float)
    s = np.arange(len(e), dtype=float) if scores is None else np.asarray(scores, float)
    if not (len(e) == len(n) == len(s)) or np.any(e < 0) or np.any(e > n):
        raise ValueError("events, totals and scores must align, with 0 <= events <= totals")
    total = n.sum()
    p = e.sum() / total if total else 0.0
    statistic = float(np.sum(s * (e - n * p)))
    variance = p * (1 - p) * (np.sum(n * s**2) - np.sum(n * s) ** 2 / total) if total else 0.0
    if variance <= 0:
        return TestResult(0.0, 1.0, "Cochran-Armitage trend")
    z = statistic / float(np.sqrt(variance))
    return TestResult(z, float(2 * norm.sf(abs(z))), "Cochran-Armitage trend")
