"""What a replay or fork produced: :class:`ReplayResult`, a frozen SQLModel (non-table) model
built once per replay (the public read model is :class:`steplog.read_models.ReplayOutcome`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict
from sqlmodel import Field, SQLModel

from ._departure import describe_departure
from ._lineage import fork_change
from ._models import Departure


def _dict(part: Departure | None) -> dict[str, Any] | None:
    return None if part is None else part.as_dict()


class ReplayResult(SQLModel):
    """What a replay or fork produced."""

    model_config = ConfigDict(frozen=True)  # type: ignore[assignment]

    mode: Literal["exact", "fork"]
    original: str
    run_id: str
    status: str
    original_status: str
    identical: bool | None
    divergence: dict[str, Any] | None
    first_difference: dict[str, Any] | None
    """Where the event streams first differ (:class:`FirstDifference`'s form for SDK runs;
    an imported run's says which of status or output differs)."""
    fork_step: int | None = None
    model_version: str | None = None
    agent_error: str | None = None
    """The agent's own exception during the replay (SDK runs), if it raised one."""
    nondeterminism: list[str] = Field(default_factory=list)
    """Direct clock/randomness reads from agent code during the replay (not recorded)."""
    edges: list[str] = Field(default_factory=list)
    """What the replay did outside itself without being refused: files written outside the
    scratch folders (see :mod:`steplog.recorder.seal`)."""
    written: bool = True
    """False for a check-only replay: its events were compared in memory, never stored."""
    departure: Departure | None = None
    """Exact replays: where the replay first departed from the recording (step, call,
    expected, got; see :func:`steplog.replay._departure.departure`), None when it behaved alike."""
    declared: list[str] = Field(default_factory=list)
    """Run-header fields (config, planned steps, versions) the current code declares
    differently from the recording."""
    notes: list[str] = Field(default_factory=list)

    @property
    def behaviour_changed(self) -> bool:
        """Whether the replay departed from the recording (a check fails)."""
        return self.departure is not None or self.divergence is not None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "mode": self.mode,
            "original": self.original,
            "run_id": self.run_id,
            "status": self.status,
            "original_status": self.original_status,
            "identical": self.identical,
            "divergence": self.divergence,
            "first_difference": self.first_difference,
            "fork_step": self.fork_step,
            "model_version": self.model_version,
            "agent_error": self.agent_error,
            "nondeterminism": list(self.nondeterminism),
            "edges": list(self.edges),
            "written": self.written,
            "behaviour_changed": self.behaviour_changed,
            "departure": _dict(self.departure),
            "declared": list(self.declared),
            "notes": list(self.notes),
        }

    @property
    def change(self) -> tuple[str, bool]:
        """The new run's status against the original's: one sentence, and whether it is good
        news (a fork that completes; see :func:`~._lineage.fork_change`)."""
        return fork_change(self.original_status, self.status)

    @property
    def good(self) -> bool:
        """Whether to show the result as a success: an exact replay that behaved as recorded
        and was identical, a fork that completes. A fork that still fails is not."""
        if self.behaviour_changed or self.agent_error is not None:
            return False
        return bool(self.identical) if self.mode == "exact" else self.change[1]

    @property
    def summary(self) -> str:
        """One line for people."""
        crash = f"; the agent raised {self.agent_error}" if self.agent_error else ""
        if self.departure is not None:
            return describe_departure(self.departure) + crash
        if self.divergence is not None:
            step, call = self.divergence["step_index"], self.divergence["call_index"]
            where = "the run" if step is None else f"step {step}"
            at = where if call is None else f"{where}, call {call}"
            return (
                f"diverged at {at}: {self.divergence['expected']} was recorded, the code asked "
                f"for {self.divergence['got']}"
            )
        if self.mode == "exact":
            if not self.identical and self.declared and self.agent_error is None:
                return "same behaviour; the run header differs: " + ", ".join(self.declared)
            if self.identical:
                reads = len(self.nondeterminism)
                return "identical" + (
                    f" (but {reads} unrecorded clock/randomness read(s): see nondeterminism)"
                    if reads
                    else ""
                )
            return f"not identical: see first_difference{crash}"
        change = self.change[0]
        return (
            f"fork at step {self.fork_step} on {self.model_version}: {self.status} "
            f"(original {self.original_status}) -- {change}"
        )
