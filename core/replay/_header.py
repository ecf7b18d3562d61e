"""Reading the recording a replay starts from: the run's events and its folded state, or for an
exact check-only replay of a scenario run only the header events it needs (:func:`header`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..harness.runner import RunStateError
from ..projections.run_state import RunState, fold, started_fields
from ..store import EventStore, StoredEvent
from ._recording import read_recording

if TYPE_CHECKING:
    from ._buffer import BufferedStore


def read_original(
    store: EventStore, run_id: str, *, lean: bool, batch: BufferedStore | None
) -> tuple[list[StoredEvent], RunState]:
    """The recorded run's events and state. ``lean`` (an exact check-only replay) reads what it
    looks at -- no ids or times, the header fold -- unless the run is not a scenario run; a
    ``batch`` buffer reads the recordings on one connection."""
    if not lean:
        events = store.read_run(run_id)
    else:
        events = read_recording(store, run_id) if batch is None else batch.recording(run_id)
    if not events:
        raise RunStateError(f"no run {run_id!r} in {store.url}")
    original = header(events) if lean else None
    if original is None or original.source != "harness":
        if lean:  # not a scenario run (an SDK or imported run): read with ids and times
            events = store.read_run(run_id)
        original = fold(events)
    return events, original


HEADER_EVENTS = frozenset(
    {
        "RunStarted",
        "RunRevised",
        "ApprovalRequested",
        "ApprovalDecided",
        "BudgetExceeded",
        "RunCompleted",
        "RunFailed",
        "RunAborted",
    }
)
"""The events that set a run's header (what it ran, with which seed, linked to what) and its
status; steps, calls and their accounting do not."""


def header(events: list[StoredEvent]) -> RunState:
    """The run's state folded from its :data:`HEADER_EVENTS` only: its header, status and
    failure as :func:`fold` gives them, without its steps, values or token counts (what an
    exact check-only replay of a scenario run needs to know about the recording). Built as
    :func:`fold`'s handlers of those events build it (tested field by field against the full
    fold), without a working draft of the whole state; a revised run is folded."""
    if not events or events[0].type != "RunStarted":
        return fold(events)  # fold's own error
    chosen = [event for event in events if event.type in HEADER_EVENTS]
    if any(event.type == "RunRevised" for event in chosen):
        return fold(chosen)  # the run started over: fold's rules
    # what fold's handlers of these events set, without a draft of the whole run state
    status, budget, output, ended_at = "running", None, None, None
    failure: tuple[Any, Any, Any, Any] = (None, None, None, None)
    for event in chosen[1:]:
        kind, p = event.type, event.payload
        if kind == "ApprovalRequested":
            if p["policy"] == "manual":
                status = "awaiting_approval"
        elif kind == "ApprovalDecided":
            status = "running"
        elif kind == "BudgetExceeded":
            budget = p["budget"]
        elif kind == "RunCompleted":
            status, output, ended_at = "completed", p.get("output"), event.recorded_at
        elif kind == "RunFailed":
            status, ended_at = "failed", event.recorded_at
            failure = (p.get("step"), p.get("step_index"), p["error_type"], p.get("message"))
        elif kind == "RunAborted":
            status, ended_at = "aborted", event.recorded_at
            failure = (p.get("step"), p.get("step_index"), budget or "aborted", p["reason"])
    last = chosen[-1]
    return RunState(
        **started_fields(chosen[0]),
        status=status,  # type: ignore[arg-type]
        failure_step=failure[0],
        failure_step_index=failure[1],
        failure_type=failure[2],
        failure_message=failure[3],
        budget_exceeded=budget,
        output=output,
        ended_at=ended_at,
        last_seq=last.seq,
        last_position=last.position,
    )
