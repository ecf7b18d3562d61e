"""A chaos profile's numbers: completion per step and fault, and which steps are fragile.

Every faulted fork has an unfaulted twin: the fork at the same step with the same seed and no
fault. The pairs make a paired 2x2 table per step and fault (a *cell*), with Tango's score
interval of the paired difference (faulted minus unfaulted completion) and the score test it
inverts. A profile tests many cells at once, so the step is **fragile** to the fault when the
test's p-value, adjusted by Benjamini-Hochberg over all the profile's cells, is below 0.05
(a false discovery rate of 5% among the steps named fragile) and completion fell. Each
completion rate is shown with its 95% Wilson interval.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict
from sqlmodel import Field, SQLModel

from ..stats.multiplicity import benjamini_hochberg
from ..stats.paired import PairedTable, tango, tango_test
from ..stats.proportions import proportion
from ..stats.results import Interval

ALPHA = 0.05
_COUNTING: Any = ConfigDict(defer_build=True)
_READ_CONFIG: Any = ConfigDict(frozen=True, defer_build=True)


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


class Pairs(SQLModel):
    """Outcomes of (faulted, unfaulted) fork pairs with the same seed: a read model the
    profile counts into while it forks (not frozen; nothing validates an increment)."""

    model_config = _COUNTING

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

    def _table(self) -> PairedTable:
        return PairedTable(self.both, self.faulted_only, self.unfaulted_only, self.neither)

    def difference(self) -> Interval | None:
        """Faulted minus unfaulted completion, Tango's paired score interval (95%)."""
        return tango(self._table()) if self.n else None

    def p_value(self) -> float:
        """Tango's score test of no difference (McNemar's z; two-sided); 1 without pairs."""
        return tango_test(self._table()).p_value if self.n else 1.0


class StepProfile(SQLModel):
    """One step (of one scenario) across the profiled runs: its baseline and each fault (a
    read model the profile counts into while it forks)."""

    model_config = _COUNTING

    scenario: str
    step: str
    step_index: int
    tool: str
    baseline_completed: int = 0
    baseline_forks: int = 0
    faults: dict[str, Pairs] = Field(default_factory=dict)

    def as_dict(self, adjusted: dict[str, float] | None = None) -> dict[str, Any]:
        """JSON-friendly form (``adjusted``: each fault's adjusted p-value, by name)."""
        faults: dict[str, Any] = {}
        for name, pairs in self.faults.items():
            gap = pairs.difference()
            p_adjusted = (adjusted or {}).get(name, 1.0)
            faults[name] = {
                **rate(pairs.faulted, pairs.n),
                "difference": gap.as_dict() if gap is not None else None,
                "pairs": {
                    "both": pairs.both,
                    "faulted_only": pairs.faulted_only,
                    "unfaulted_only": pairs.unfaulted_only,
                    "neither": pairs.neither,
                },
                "p_value": pairs.p_value(),
                "p_adjusted": p_adjusted,
                "fragile": _fragile(pairs, p_adjusted),
            }
        return {
            "scenario": self.scenario,
            "step": self.step,
            "step_index": self.step_index,
            "tool": self.tool,
            "unfaulted": rate(self.baseline_completed, self.baseline_forks),
            "faults": faults,
        }


def _fragile(pairs: Pairs, p_adjusted: float) -> bool:
    return pairs.unfaulted_only > pairs.faulted_only and p_adjusted < ALPHA


def adjust(steps: tuple[StepProfile, ...]) -> list[dict[str, float]]:
    """Each step's faults' p-values, Benjamini-Hochberg adjusted over every cell of the profile."""
    cells = [(i, name, pairs) for i, s in enumerate(steps) for name, pairs in s.faults.items()]
    adjusted = benjamini_hochberg([pairs.p_value() for _, _, pairs in cells])
    found: list[dict[str, float]] = [{} for _ in steps]
    for (i, name, _), value in zip(cells, adjusted, strict=True):
        found[i][name] = value
    return found


class ChaosProfile(SQLModel):
    """The whole answer: per step and fault, the fragile ones, the forks spent (a frozen
    SQLModel read model)."""

    model_config = _READ_CONFIG

    target: str
    kind: str
    runs: tuple[str, ...]
    faults: tuple[str, ...]
    forks_per_step: int
    steps: tuple[StepProfile, ...]
    forks_spent: int
    sessions: tuple[str, ...]
    skipped: tuple[str, ...] = ()
    forks_reused: int = 0
    """Of ``forks_spent``, forks read back from the log (same step, seed and fault) instead of
    forked again."""

    @property
    def adjusted(self) -> list[dict[str, float]]:
        """Per step, each fault's Benjamini-Hochberg adjusted p-value."""
        return adjust(self.steps)

    @property
    def fragile(self) -> list[tuple[StepProfile, str]]:
        """(step, fault) cells whose completion is significantly below the unfaulted twins'."""
        return [
            (step, fault)
            for step, adjusted in zip(self.steps, self.adjusted, strict=True)
            for fault, pairs in step.faults.items()
            if _fragile(pairs, adjusted[fault])
        ]

    def is_fragile(self, step: str, fault: str) -> bool:
        """Whether ``step`` (by name) is fragile to ``fault``."""
        return any(s.step == step and f == fault for s, f in self.fragile)

    @property
    def summary(self) -> str:
        """One line for people."""
        found = self.fragile
        spent = f"{self.forks_spent} forks"
        if self.forks_reused:
            spent += (
                f": {self.forks_spent - self.forks_reused} new, {self.forks_reused} read back "
                "from the log"
            )
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
            "steps": [
                step.as_dict(adjusted)
                for step, adjusted in zip(self.steps, self.adjusted, strict=True)
            ],
            "fragile": [
                {"scenario": s.scenario, "step": s.step, "step_index": s.step_index, "fault": f}
                for s, f in self.fragile
            ],
            "forks_spent": self.forks_spent,
            "forks_reused": self.forks_reused,
            "sessions": list(self.sessions),
            "skipped": list(self.skipped),
            "rule": "fragile: completion fell and Tango's paired score test (faulted vs the "
            "unfaulted twin with the same seed), Benjamini-Hochberg adjusted over every cell, "
            f"has p < {ALPHA}",
            "summary": self.summary,
        }
