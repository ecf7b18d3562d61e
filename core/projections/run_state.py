"""The structured state of one run (article 001 §5.2), as a pure fold over its events.

``apply(state, event) -> state`` never mutates its input and does no I/O, so the state is
available as of any event (time travel: fold a prefix) and resume can rebuild exactly where a
run stopped. Internally every fold works on a private mutable draft and freezes it once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from datetime import datetime
from operator import attrgetter
from typing import Any

from ..store import StoredEvent
from .run_types import TERMINAL, NotARunError, RunState, RunStatus, StepState, StepStatus

__all__ = [
    "TERMINAL",
    "NotARunError",
    "RunState",
    "RunStatus",
    "StepState",
    "StepStatus",
    "apply",
    "as_of",
    "fold",
    "fold_from",
    "started_fields",
]


def apply(state: RunState | None, event: StoredEvent) -> RunState:
    """Fold one event into the run state (pure: ``state`` is never changed)."""
    if state is None:
        return _RunDraft.start(event).freeze()
    draft = _RunDraft.thaw(state)
    draft.apply(event)
    return draft.freeze()


def fold(events: Sequence[StoredEvent]) -> RunState:
    """The state after all ``events`` of one run (in seq order)."""
    if not events:
        raise NotARunError("no events")
    return fold_from(None, events)


def as_of(
    events: Sequence[StoredEvent], *, step: int | None = None, position: int | None = None
) -> RunState:
    """Time travel: the run's state after step ``step`` ended, or as of ``position``.

    "After step K" is everything before step K+1 began (its gate or its first attempt).
    """
    cut = len(events)
    if position is not None:
        cut = sum(1 for event in events if event.position <= position)
    if step is not None:
        for index, event in enumerate(events[:cut]):
            starts_next = event.type in ("StepStarted", "ApprovalRequested")
            if starts_next and event.payload.get("step_index", -1) > step:
                cut = index
                break
    if cut == 0:
        raise NotARunError(f"run has no events as of position {position}")
    return fold(events[:cut])


def fold_from(state: RunState | None, events: Iterable[StoredEvent]) -> RunState:
    """``state`` with ``events`` applied, as one pure step (what catch-up uses)."""
    iterator = iter(events)
    if state is None:
        first = next(iterator, None)
        if first is None:
            raise NotARunError("no events")
        draft = _RunDraft.start(first)
    else:
        draft = _RunDraft.thaw(state)
    handlers = _HANDLERS
    for event in iterator:  # draft.apply(event), inlined: this loop runs for every event
        draft.last_seq = event.seq
        draft.last_position = event.position
        handler = handlers.get(event.type)
        if handler is not None:
            handler(draft, event.payload, event)
    return draft.freeze()


_STEP_FIELDS = StepState._fields
_RUN_FIELDS = tuple(f.name for f in fields(RunState) if f.name != "steps")


class _StepDraft:
    """A mutable working copy of a :class:`StepState`, private to one fold."""

    __slots__ = _STEP_FIELDS
    name: str
    index: int
    status: StepStatus
    attempts: int
    failed_attempts: int
    last_error: str | None
    last_error_type: str | None
    output: dict[str, Any] | None
    output_summary: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    started_at: datetime | None
    finished_at: datetime | None
    approval: bool | None
    last_response: Any

    @classmethod
    def new(cls, name: str, index: int) -> _StepDraft:
        return cls.thaw(StepState(name, index))

    @classmethod
    def thaw(cls, step: StepState) -> _StepDraft:
        draft = cls.__new__(cls)
        (
            draft.name,
            draft.index,
            draft.status,
            draft.attempts,
            draft.failed_attempts,
            draft.last_error,
            draft.last_error_type,
            draft.output,
            draft.output_summary,
            draft.input_tokens,
            draft.output_tokens,
            draft.cost_usd,
            draft.started_at,
            draft.finished_at,
            draft.approval,
            draft.last_response,
        ) = step
        return draft

    def freeze(self) -> StepState:
        return StepState(
            self.name,
            self.index,
            self.status,
            self.attempts,
            self.failed_attempts,
            self.last_error,
            self.last_error_type,
            self.output,
            self.output_summary,
            self.input_tokens,
            self.output_tokens,
            self.cost_usd,
            self.started_at,
            self.finished_at,
            self.approval,
            self.last_response,
        )


_run_values = attrgetter(*_RUN_FIELDS)
_RUN_SETTERS = tuple(RunState.__dict__[name].__set__ for name in _RUN_FIELDS)
_SET_VALUES = RunState.__dict__["values"].__set__
_SET_STEPS = RunState.__dict__["steps"].__set__


def started_fields(event: StoredEvent) -> dict[str, Any]:
    """The :class:`RunState` fields a run's ``RunStarted`` sets (what it ran, with which seed,
    linked to what), as the fold reads them from its payload."""
    p = event.payload
    return {
        "run_id": event.run_id,
        "scenario": p["scenario"],
        "model_version": p["model_version"],
        "agent": p["agent"],
        "agent_version": p.get("agent_version", "1"),
        "task_instance_id": p.get("task_instance_id"),
        "task_type": p.get("task_type"),
        "seed": p.get("seed"),
        "config": dict(p.get("config") or {}),
        "input": dict(p.get("input") or {}),
        "planned_steps": tuple(p.get("planned_steps") or ()),
        "source": p.get("source", "harness"),
        "gate_policy": p.get("gate_policy"),
        "replay_of": p.get("replay_of"),
        "forked_from": p.get("forked_from"),
        "fork_step": p.get("fork_step"),
        "started_at": event.recorded_at,
        "session_id": p.get("session_id"),
        "user_id": p.get("user_id"),
        "gaps": tuple(p.get("gaps") or ()),
        "rerun_of": p.get("rerun_of"),
    }


class _RunDraft:
    """A mutable working copy of a :class:`RunState`, private to one fold.

    Folding through a draft builds each frozen state once per fold instead of once per event;
    ``apply``, ``fold`` and ``fold_from`` all go through it, so there is one set of rules.
    """

    __slots__ = (*_RUN_FIELDS, "steps")
    steps: dict[int, _StepDraft]
    values: dict[str, Any]
    last_seq: int
    last_position: int

    @classmethod
    def start(cls, event: StoredEvent) -> _RunDraft:
        if event.type != "RunStarted":
            raise NotARunError(
                f"run {event.run_id!r} does not start with RunStarted ({event.type})"
            )
        state = RunState(
            **started_fields(event),
            last_seq=event.seq,
            last_position=event.position,
            values={},
        )
        return cls.thaw(state)

    @classmethod
    def thaw(cls, state: RunState) -> _RunDraft:
        draft = cls.__new__(cls)
        for field_name, value in zip(_RUN_FIELDS, _run_values(state), strict=True):
            setattr(draft, field_name, value)
        draft.values = dict(state.values)
        draft.steps = {step.index: _StepDraft.thaw(step) for step in state.steps}
        return draft

    def freeze(self) -> RunState:
        # RunState(**fields) with every field given, its slots set directly: the frozen
        # dataclass's __init__ checks each of its ~40 assignments (a fold freezes once)
        state: RunState = object.__new__(RunState)
        for set_field, value in zip(_RUN_SETTERS, _run_values(self), strict=True):
            set_field(state, value)
        _SET_VALUES(state, dict(self.values))
        _SET_STEPS(state, tuple(step.freeze() for step in self.steps.values()))
        return state

    def step(self, index: int, name: str) -> _StepDraft:
        found: _StepDraft | None = self.steps.get(index)
        if found is None:
            found = self.steps[index] = _StepDraft.new(name, index)
        return found

    def apply(self, event: StoredEvent) -> None:
        self.last_seq = event.seq
        self.last_position = event.position
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event.payload, event)


def _step_started(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    step = run.step(p["step_index"], p["step"])
    step.status = "running"
    step.attempts = p.get("attempt", 1)
    if step.started_at is None:
        step.started_at = event.recorded_at
    run.status = "running"


def _attempt_failed(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    step = run.step(p["step_index"], p["step"])
    error_type = p.get("error_type") or f"validation:{p.get('layer')}:{p.get('check')}"
    step.failed_attempts += 1
    step.last_error = p.get("message") or error_type
    step.last_error_type = error_type


def _step_completed(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    step = run.step(p["step_index"], p["step"])
    step.status = "done"
    step.output = p.get("output", {})
    step.output_summary = p.get("output_summary")
    step.finished_at = event.recorded_at
    run.values[p["step"]] = p.get("output", {})


def _step_failed(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    step = run.step(p["step_index"], p["step"])
    step.status = "failed"
    step.last_error = p.get("message") or p["error_type"]
    step.last_error_type = p["error_type"]
    step.finished_at = event.recorded_at


def _model_called(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    tokens_in, tokens_out = p.get("input_tokens", 0), p.get("output_tokens", 0)
    cost = p.get("cost_usd", 0.0)
    run.model_calls += 1
    run.call_index = max(run.call_index, p["call_index"] + 1)
    run.input_tokens += tokens_in
    run.output_tokens += tokens_out
    run.cost_usd += cost
    index = p.get("step_index")
    step = run.steps.get(index) if index is not None else None
    if step is not None:
        step.input_tokens += tokens_in
        step.output_tokens += tokens_out
        step.cost_usd += cost
        step.last_response = p.get("response")


def _call_recorded(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    if event.type == "ToolCalled":
        run.tool_calls += 1
    run.call_index = max(run.call_index, p["call_index"] + 1)


def _approval_requested(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    if p["policy"] == "manual":
        run.step(p["step_index"], p["step"]).status = "awaiting_approval"
        run.status = "awaiting_approval"


def _approval_decided(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    step = run.step(p["step_index"], p["step"])
    step.status = "running" if p["approved"] else "rejected"
    step.approval = p["approved"]
    step.last_error = None if p["approved"] else (p.get("reason") or "rejected at the gate")
    run.status = "running"


def _budget_exceeded(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    run.budget_exceeded = p["budget"]


def _run_completed(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    run.status = "completed"
    run.output = p.get("output")
    run.ended_at = event.recorded_at


def _run_failed(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    run.status = "failed"
    run.failure_step = p.get("step")
    run.failure_step_index = p.get("step_index")
    run.failure_type = p["error_type"]
    run.failure_message = p.get("message")
    run.ended_at = event.recorded_at


def _run_aborted(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    run.status = "aborted"
    run.failure_step = p.get("step")
    run.failure_step_index = p.get("step_index")
    run.failure_type = run.budget_exceeded or "aborted"
    run.failure_message = p["reason"]
    run.ended_at = event.recorded_at


def _run_revised(run: Any, p: dict[str, Any], event: StoredEvent) -> None:
    """Start the run over from the revised ``RunStarted``; its identity and start time stay."""
    fresh = _RunDraft.start(event._replace(type="RunStarted", payload=p["started"]))
    for name in _RUN_FIELDS:
        if name not in ("run_id", "started_at", "last_seq", "last_position"):
            setattr(run, name, getattr(fresh, name))
    run.values = {}
    run.steps = {}


_HANDLERS: dict[str, Callable[[Any, dict[str, Any], StoredEvent], None]] = {
    "RunRevised": _run_revised,
    "StepStarted": _step_started,
    "StepAttemptFailed": _attempt_failed,
    "ValidationFailed": _attempt_failed,
    "StepCompleted": _step_completed,
    "StepFailed": _step_failed,
    "ModelCalled": _model_called,
    "ToolCalled": _call_recorded,
    "RandomDrawn": _call_recorded,
    "ClockRead": _call_recorded,
    "ApprovalRequested": _approval_requested,
    "ApprovalDecided": _approval_decided,
    "BudgetExceeded": _budget_exceeded,
    "RunCompleted": _run_completed,
    "RunFailed": _run_failed,
    "RunAborted": _run_aborted,
}
