"""Serving a recording back: what makes replay deterministic.

A :class:`Playback` holds a run's recorded nondeterministic acts -- model calls, tool calls,
clock reads, random draws -- in call order, plus its recorded gate decisions. The harness asks
it instead of the simulated model, the tools and the clock. Each request must match the next
recorded call (same kind, step, name and request fingerprint); the first that does not raises
:class:`Divergence`, so a replay never silently goes live. With ``live_from_step`` (a fork) the
recording is served only for the steps before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..canonical import fingerprint
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


@dataclass
class Playback:
    """The recorded calls of a run, served in order."""

    calls: list[StoredEvent]
    decisions: dict[int, dict[str, Any]] = field(default_factory=dict)
    live_from_step: int | None = None
    names_from_step: int = 0
    """Model names are checked from this step on; a fork's earlier steps ran on another model."""
    cursor: int = 0

    @classmethod
    def of(
        cls,
        events: list[StoredEvent],
        *,
        live_from_step: int | None = None,
        names_from_step: int = 0,
    ) -> Playback:
        """The playback of a run's events (only the steps before ``live_from_step``).

        The run's start clock (read before its first step) is always served, so a fork at
        step 0 keeps the original's clock. A fork after the step where the run stopped is
        refused: it would only replay the failure.
        """
        if live_from_step is not None:
            stop = stopped_at(events)
            if stop is not None and live_from_step > stop[0]:
                raise ForkPointError(
                    f"the run stopped at step {stop[0]} ({stop[1]}): a fork at step "
                    f"{live_from_step} would only replay that; fork at a step from 0 to {stop[0]}"
                )
        if live_from_step is None:  # an exact replay serves every recorded call and decision
            calls = [event for event in events if event.type in CALL_TYPES]
            decisions = {
                e.payload["step_index"]: e.payload for e in events if e.type == "ApprovalDecided"
            }
            return cls(calls, decisions, None, names_from_step)
        stepped = False

        def served(event: StoredEvent) -> bool:
            step = event.payload.get("step_index")
            if not stepped and event.type == "ClockRead":
                return True  # the run's start time
            return live_from_step is None or step is None or step < live_from_step

        calls = []
        for event in events:
            stepped = stepped or event.type == "StepStarted"
            if event.type in CALL_TYPES and served(event):
                calls.append(event)
        decisions = {
            e.payload["step_index"]: e.payload
            for e in events
            if e.type == "ApprovalDecided" and served(e)
        }
        return cls(calls, decisions, live_from_step, names_from_step)

    def checks_name(self, step_index: int) -> bool:
        """Whether the model asked for must be the one recorded at this step."""
        return self.live_from_step is None and step_index >= self.names_from_step

    def serving(self, step_index: int | None) -> bool:
        """Whether calls of ``step_index`` come from the recording (else: live)."""
        if self.live_from_step is None or step_index is None:
            return True
        return step_index < self.live_from_step

    def take(
        self,
        kind: str,
        step_index: int | None,
        *,
        name: str | None = None,
        request: Any = None,
        check_name: bool = True,
    ) -> dict[str, Any]:
        """The next recorded call, if it is the one being asked for."""
        if self.cursor >= len(self.calls):
            raise Divergence(
                step_index, None, "the end of the recording", _asked(kind, name, step_index)
            )
        event = self.calls[self.cursor]
        payload = event.payload
        recorded_name = payload.get("model") or payload.get("tool")
        same = event.type == kind and payload.get("step_index") == step_index
        if same and check_name and name is not None:
            same = recorded_name == name
        if same and request is not None and payload.get("fingerprint"):
            recorded_request = payload.get("request", payload.get("args"))
            # the same request (the usual case) has the same fingerprint: skip hashing it
            same = recorded_request == request or (
                fingerprint(str(recorded_name), request) == payload["fingerprint"]
            )
        if not same:
            got = _asked(kind, name, step_index)
            if request is not None:
                got = (
                    got[:-1] + f", request {fingerprint(str(name or recorded_name), request)[:10]})"
                )
            raise Divergence(
                step_index, payload.get("call_index"), describe(event.type, payload), got
            )
        self.cursor += 1
        return dict(payload)

    def take_recorded(
        self,
        kind: str,
        step_index: int,
        *,
        name: str,
        request: Any,
        check_name: bool = True,
    ) -> dict[str, Any]:
        """:meth:`take` for a model or tool call, giving the recorded payload itself (not a
        copy: the caller must not change it) when the call is the one asked for with the very
        request recorded (the usual case, decided without hashing); anything else is decided
        by :meth:`take`, which also raises its :class:`Divergence`."""
        cursor = self.cursor
        if cursor < len(self.calls) and request is not None:
            event = self.calls[cursor]
            payload = event.payload
            if (
                event.type == kind
                and payload.get("step_index") == step_index
                and (not check_name or (payload.get("model") or payload.get("tool")) == name)
                and payload.get("request", payload.get("args")) == request
            ):
                self.cursor = cursor + 1
                return payload
        return self.take(kind, step_index, name=name, request=request, check_name=check_name)

    def leftover(self) -> StoredEvent | None:
        """The first recorded call nobody asked for (in the served steps)."""
        return self.calls[self.cursor] if self.cursor < len(self.calls) else None


def _asked(kind: str, name: str | None, step_index: int | None) -> str:
    """What the code asked for, for a divergence message."""
    return f"{kind}({name or ''}{', ' if name else ''}step {step_index})"
