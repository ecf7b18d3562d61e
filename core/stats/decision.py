"""One decision rule per report: the verdict's test and interval come from one family.

* paired, each task once: Tango's score interval with Tango's score test (McNemar's z);
  the exact check is McNemar's mid-p.
* independent, each task once: Miettinen-Nurminen's score interval with their score test;
  the exact check is Boschloo's test.
* tasks repeat (paired or not): the CR2 cluster-robust t interval with its own t test.

The score interval excludes 0 exactly when its test rejects, so "better"/"worse" never
contradicts the printed test. When the exact check disagrees with the asymptotic test the
verdict is "borderline" and says both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import paired, proportions
from .cluster_robust import RobustEstimate
from .paired import PairedTable
from .results import Interval, TestResult

EXACT_CHECK_MAX_TABLES = 40_000
"""Boschloo's check enumerates (n1+1)(n2+1) tables (~2 s at 400 vs 400); beyond ~200 runs a
side the score test stands alone, where exact and asymptotic p-values no longer part ways."""

BETTER = "candidate better"
WORSE = "candidate worse"
BORDERLINE = "borderline"
NO_DIFFERENCE = "no clear difference"


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict's head, with the interval and test it rests on."""

    head: str
    interval: Interval
    test: TestResult
    check: TestResult | None
    design: str
    n: int
    unit: str  # "pairs" or "runs"
    task_instances: int | None = None
    design_effect: float | None = None
    df: int | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        i = self.interval
        return {
            "head": self.head,
            "estimate": i.estimate,
            "ci": [i.low, i.high],
            "confidence": i.confidence,
            "alpha": alpha_of(i.confidence),
            "method": i.method,
            "test": self.test.test,
            "statistic": self.test.statistic,
            "p_value": self.test.p_value,
            "check_test": self.check.test if self.check else None,
            "check_p_value": self.check.p_value if self.check else None,
            "design": self.design,
            "n": self.n,
            "unit": self.unit,
            "task_instances": self.task_instances,
            "design_effect": self.design_effect,
            "df": self.df,
            "reason": self.reason,
        }


def head_of(interval: Interval, test: TestResult, check: TestResult | None) -> tuple[str, str]:
    """better/worse only when the test rejects, the interval excludes 0 on that side, and the
    exact check (if any) also rejects; borderline when they disagree."""
    alpha = 1 - interval.confidence
    rejects = test.p_value < alpha
    excludes = interval.low > 0 or interval.high < 0
    if rejects != excludes:
        return BORDERLINE, "the test and the interval disagree at this precision"
    if check is not None and (check.p_value < alpha) != rejects:
        return BORDERLINE, (f"{test.test} and {check.test} disagree about p < {_fmt_alpha(alpha)}")
    if not rejects:
        return NO_DIFFERENCE, ""
    return (BETTER if interval.low > 0 else WORSE), ""


def alpha_of(confidence: float) -> float:
    """1 - confidence without floating-point noise (0.05, not 0.050000000000000044)."""
    return round(1 - confidence, 10)


def _fmt_alpha(alpha: float) -> str:
    return f"{round(alpha, 10):g}"


def decide_paired(table: PairedTable, *, confidence: float = 0.95) -> Decision:
    """Paired pairs, each task instance once: Tango interval + Tango score test, mid-p check."""
    interval = paired.tango(table, confidence=confidence)
    test = paired.tango_test(table)
    check = paired.mcnemar_mid_p(table)
    head, reason = head_of(interval, test, check)
    return Decision(head, interval, test, check, "paired", table.n, "pairs", reason=reason)


def decide_independent(
    candidate: tuple[int, int], baseline: tuple[int, int], *, confidence: float = 0.95
) -> Decision:
    """Independent runs, each task once: MN interval + MN score test, Boschloo check."""
    (x1, n1), (x2, n2) = candidate, baseline
    interval = proportions.difference(
        x1, n1, x2, n2, method="miettinen-nurminen", confidence=confidence
    )
    interval = Interval(
        interval.estimate,
        interval.low,
        interval.high,
        "Miettinen-Nurminen score",
        n1 + n2,
        confidence,
    )
    test = proportions.mn_test(x1, n1, x2, n2)
    small = (n1 + 1) * (n2 + 1) <= EXACT_CHECK_MAX_TABLES
    check = proportions.boschloo(x1, n1, x2, n2) if small else None
    head, reason = head_of(interval, test, check)
    return Decision(head, interval, test, check, "independent", n1 + n2, "runs", reason=reason)


def decide_clustered(robust: RobustEstimate, *, design: str, unit: str) -> Decision:
    """Tasks repeat: the CR2 t interval and its own t test (no separate exact check)."""
    head, reason = head_of(robust.interval, robust.test, None)
    return Decision(
        head,
        robust.interval,
        robust.test,
        None,
        design,
        robust.n,
        unit,
        task_instances=robust.clusters,
        design_effect=robust.design_effect,
        df=robust.df,
        reason=reason,
    )
