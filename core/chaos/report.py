"""A chaos profile's numbers: completion per step and fault, and which steps are fragile.

Every faulted fork has an unfaulted twin: the fork at the same step with the same seed and no
fault. The pairs make a paired 2x2 table per step and fault; the step is **fragile** to the
fault when Tango's 95% score interval of the paired difference (faulted minus unfaulted
completion) lies below 0. Each completion rate is shown with its 95% Wilson interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..stats.paired import PairedTable, tango
from ..stats.proportions import proportion
from ..stats.results import Interval


def rate(completed: int, forks: int) -> dict[str, Any]:
    """A completion rate with its Wilson interval (JSON form); ``None`` rate for no forks."""
    if forks == 0:
        return {"completed": 0, "forks": 0, "rate": None, "ci": None, "method": "wilson"}
    interval = proportion(completed, forks)
    return {
        "completed": completed,
        "forks": forks,
        "rate": interval.estimate,
        "ci": [interval.low, interval.high],
        "method": interval.method,
    }


@dataclass
class Pairs:
    """Outcomes of (faulted, unfaulted) fork pairs with the same seed."""

    both: int = 0
    faulted_only: int = 0
    unfaulted_only: int = 0
    neither: int = 0

    def add(self, faulted: bool, unfaulted: bool) -> None:
        """Count one pair."""
        if faulted and unfaulted:
            self.both += 1
        elif faulted:
            self.faulted_only += 1
        elif unfaulted:
            self.unfaulted_only += 1
        else:
            self.neither += 1

    @property
    def n(self) -> int:
        """Number of pairs."""
        return self.both + self.faulted_only + self.unfaulted_only + self.neither

    @property
    def faulted(self) -> int:
        """Faulted forks that completed."""
        return self.both + self.faulted_only

    @property
    def unfaulted(self) -> int:
        """Unfaulted forks that completed."""
        return self.both + self.unfaulted_only

    def difference(self) -> Interval | None:
        """Faulted minus unfaulted completion, Tango's paired score interval."""
        if self.n == 0:
            return None
        table = PairedTable(self.both, self.faulted_only, self.unfaulted_only, self.neither)
        return tango(table)

    @property
    def fragile(self) -> bool:
        """Completion significantly below the unfaulted twins' (the interval below 0)."""
        gap = self.difference()
        return gap is not None and gap.high < 0


@dataclass
class StepProfile:
    """One step (of one scenario) across the profiled runs: its baseline and each fault."""

    scenario: str
    step: str
    step_index: int
    tool: str
    baseline_completed: int = 0
    baseline_forks: int = 0
    faults: dict[str, Pairs] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        faults: dict[str, Any] = {}
        for name, pairs in self.faults.items():
            gap = pairs.difference()
            faults[name] = {
                **rate(pairs.faulted, pairs.n),
                "difference": gap.as_dict() if gap is not None else None,
                "pairs": {
                    "both": pairs.both,
                    "faulted_only": pairs.faulted_only,
                    "unfaulted_only": pairs.unfaulted_only,
                    "neither": pairs.neither,
                },
                "fragile": pairs.fragile,
            }
        return {
            "scenario": self.scenario,
            "step": self.step,
            "step_index": self.step_index,
            "tool": self.tool,
            "unfaulted": rate(self.baseline_completed, self.baseline_forks),
            "faults": faults,
        }


@dataclass(frozen=True, slots=True)
class ChaosProfile:
    """The whole answer: per step and fault, the fragile ones, the forks spent."""

    target: str
    kind: str
    runs: tuple[str, ...]
    faults: tuple[str, ...]
    forks_per_step: int
    steps: tuple[StepProfile, ...]
    forks_spent: int
    sessions: tuple[str, ...]
    skipped: tuple[str, ...] = ()

    @property
    def fragile(self) -> list[tuple[StepProfile, str]]:
        """(step, fault) pairs whose completion is significantly below the unfaulted twins'."""
        return [
            (step, fault) for step in self.steps for fault, p in step.faults.items() if p.fragile
        ]

    @property
    def summary(self) -> str:
        """One line for people."""
        found = self.fragile
        spent = f"{self.forks_spent} forks"
        if not found:
            return (
                f"no fragile step: no fault lowered completion significantly below the "
                f"unfaulted forks' ({spent})"
            )
        named = ", ".join(
            f"{s.step} ({fault} {p.faulted}/{p.n} vs {p.unfaulted}/{p.n})"
            for s, fault in found
            for p in [s.faults[fault]]
        )
        return f"fragile: {named} ({spent})"

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "target": self.target,
            "kind": self.kind,
            "runs": list(self.runs),
            "faults": list(self.faults),
            "forks_per_step": self.forks_per_step,
            "steps": [step.as_dict() for step in self.steps],
            "fragile": [
                {"scenario": s.scenario, "step": s.step, "step_index": s.step_index, "fault": f}
                for s, f in self.fragile
            ],
            "forks_spent": self.forks_spent,
            "sessions": list(self.sessions),
            "skipped": list(self.skipped),
            "rule": "fragile: Tango 95% interval of the paired difference (faulted minus "
            "unfaulted twin with the same seed) below 0",
            "summary": self.summary,
        }
