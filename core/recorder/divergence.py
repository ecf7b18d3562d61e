"""How a replay says it went its own way: :class:`Divergence` (the code asked for a call the
recording does not have, or left one unasked), the kinds of recorded calls a playback serves,
and where a recorded run stopped (a fork past it is refused: :class:`ForkPointError`)."""

from __future__ import annotations

from typing import Any

from ..errors import SteplogError
from ..store import StoredEvent

CALL_TYPES = frozenset({"ModelCalled", "ToolCalled", "ClockRead", "RandomDrawn"})


class Divergence(SteplogError):
    """The code asked for something the recording does not have."""

    def __init__(self, step_index: int | None, call_index: int | None, expected: str, got: str):
        self.step_index = step_index
        self.call_index = call_index
        self.expected = expected
        self.got = got
        where = f"step {step_index}" if step_index is not None else "the run"
        super().__init__(
            f"replay diverged at {where}, call {call_index}: expected {expected}, got {got}"
        )

    def __reduce__(self) -> Any:  # crosses process pools: rebuilt from its four fields
        return (type(self), (self.step_index, self.call_index, self.expected, self.got))

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "step_index": self.step_index,
            "call_index": self.call_index,
            "expected": self.expected,
            "got": self.got,
        }


class ForkPointError(SteplogError):
    """A fork at a step the recording cannot serve up to (after the step where it stopped)."""


def stopped_at(events: list[StoredEvent]) -> tuple[int, str] | None:
    """The step index and name where a failed or aborted run stopped, if it names one."""
    for event in reversed(events):
        if event.type in ("RunFailed", "RunAborted"):
            step = event.payload.get("step_index")
            if step is None:
                return None
            return int(step), str(event.payload.get("step") or f"step {step}")
        if event.type == "RunCompleted":
            return None
    return None


def describe(event_type: str, payload: dict[str, Any]) -> str:
    """A short human description of a recorded call."""
    name = payload.get("model") or payload.get("tool") or payload.get("kind") or ""
    fp = payload.get("fingerprint")
    step = payload.get("step_index")
    return f"{event_type}({name}{', ' if name else ''}step {step}" + (
        f", request {fp[:10]})" if fp else ")"
    )


def asked(kind: str, name: str | None, step_index: int | None) -> str:
    """What the code asked for, for a divergence message."""
    return f"{kind}({name or ''}{', ' if name else ''}step {step_index})"
