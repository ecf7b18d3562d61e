"""The structured state of one run (article 001 §5.2), as a pure fold over its events.

``apply(state, event) -> state`` never mutates its input and does no I/O, so the state is
available as of any event (time travel: fold a prefix) and resume can rebuild exactly where a
run stopped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from ..canonical import fingerprint
from ..errors import SteplogError
from ..store import StoredEvent

RunStatus = Literal["running", "completed", "failed", "aborted", "awaiting_approval"]
StepStatus = Literal["running", "done", "failed", "awaiting_approval", "rejected"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "aborted"})


@dataclass(frozen=True, slots=True)
class StepState:
    """One step of a run: status, attempts, last error, output and its summary."""

    name: str
    index: int
    status: StepStatus = "running"
    attempts: int = 0
    failed_attempts: int = 0
    last_error: str | None = None
    last_error_type: str | None = None
    output: dict[str, Any] | None = None
    output_summary: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    approval: bool | None = None
    last_response: str | None = None
    """Fingerprint of the step's last model response (the harness detects loops with it)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the article's step object, plus accounting)."""
        return {
            "name": self.name,
            "index": self.index,
            "status": self.status,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "last_error_type": self.last_error_type,
            "output_summary": self.output_summary,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "tokens": self.input_tokens + self.output_tokens,
            "cost_usd": round(self.cost_usd, 6),
        }


@dataclass(frozen=True, slots=True)
class RunState:
    """Everything known about a run as of its last applied event."""

    run_id: str
    scenario: str
    model_version: str
    agent: str
    agent_version: str
    task_instance_id: str | None
    task_type: str | None
    seed: int | None
    config: dict[str, Any]
    input: dict[str, Any]
    planned_steps: tuple[str, ...]
    source: str
    gate_policy: str | None
    replay_of: str | None
    forked_from: str | None
    fork_step: int | None
    started_at: datetime
    status: RunStatus = "running"
    steps: tuple[StepState, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model_calls: int = 0
    tool_calls: int = 0
    call_index: int = 0
    failure_step: str | None = None
    failure_step_index: int | None = None
    failure_type: str | None = None
    failure_message: str | None = None
    budget_exceeded: str | None = None
    output: dict[str, Any] | None = None
    ended_at: datetime | None = None
    last_seq: int = 0
    last_position: int = 0
    values: dict[str, Any] = field(default_factory=dict)
    """The task's working state: every completed step's output, keyed by step name."""

    @property
    def version(self) -> int:
        """The run's version (number of events): what the next append must expect."""
        return self.last_seq + 1

    @property
    def retries(self) -> int:
        """Attempts beyond the first, over all steps."""
        return sum(max(s.attempts - 1, 0) for s in self.steps)

    @property
    def current_step(self) -> StepState | None:
        """The newest step that has started."""
        return self.steps[-1] if self.steps else None

    @property
    def run_mode(self) -> str:
        """``manual_review_required`` while a gate waits for a person, else ``automatic``."""
        return "manual_review_required" if self.status == "awaiting_approval" else "automatic"

    @property
    def is_terminal(self) -> bool:
        """Completed, failed or aborted: nothing more will happen."""
        return self.status in TERMINAL

    @property
    def first_step_correct(self) -> bool | None:
        """Step 0 completed on its first attempt (``None`` before step 0 ended)."""
        first = self.steps[0] if self.steps else None
        if first is None or first.status not in ("done", "failed"):
            return None
        return first.status == "done" and first.failed_attempts == 0

    @property
    def mid_run_errors(self) -> int:
        """Steps after the first that had at least one failed attempt."""
        return sum(1 for s in self.steps[1:] if s.failed_attempts > 0)

    @property
    def mid_run_recovered(self) -> int:
        """Steps after the first that failed an attempt and still completed."""
        return sum(1 for s in self.steps[1:] if s.failed_attempts > 0 and s.status == "done")

    def step(self, index: int) -> StepState | None:
        """The step with ``index``, if it has started."""
        for candidate in self.steps:
            if candidate.index == index:
                return candidate
        return None

    def as_dict(self) -> dict[str, Any]:
        """The article 001 §5.2 state object, plus run accounting."""
        current = self.current_step
        return {
            "task_id": self.run_id,
            "scenario": self.scenario,
            "task_instance_id": self.task_instance_id,
            "model_version": self.model_version,
            "status": self.status,
            "current_step": current.name if current else None,
            "steps": [s.as_dict() for s in self.steps],
            "run_mode": self.run_mode,
            "retries": self.retries,
            "tokens": self.input_tokens + self.output_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "failure": None
            if self.failure_type is None
            else {
                "step": self.failure_step,
                "step_index": self.failure_step_index,
                "error_type": self.failure_type,
                "message": self.failure_message,
            },
            "first_step_correct": self.first_step_correct,
            "mid_run_errors": self.mid_run_errors,
            "mid_run_recovered": self.mid_run_recovered,
            "replay_of": self.replay_of,
            "forked_from": self.forked_from,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "version": self.version,
        }


class NotARunError(SteplogError):
    """The events of a run id do not start with RunStarted."""


def apply(state: RunState | None, event: StoredEvent) -> RunState:
    """Fold one event into the run state (pure)."""
    p = event.payload
    kind = event.type
    if state is None:
        if kind != "RunStarted":
            raise NotARunError(f"run {event.run_id!r} does not start with RunStarted ({kind})")
        return RunState(
            run_id=event.run_id,
            scenario=p["scenario"],
            model_version=p["model_version"],
            agent=p["agent"],
            agent_version=p.get("agent_version", "1"),
            task_instance_id=p.get("task_instance_id"),
            task_type=p.get("task_type"),
            seed=p.get("seed"),
            config=dict(p.get("config") or {}),
            input=dict(p.get("input") or {}),
            planned_steps=tuple(p.get("planned_steps") or ()),
            source=p.get("source", "harness"),
            gate_policy=p.get("gate_policy"),
            replay_of=p.get("replay_of"),
            forked_from=p.get("forked_from"),
            fork_step=p.get("fork_step"),
            started_at=event.recorded_at,
            last_seq=event.seq,
            last_position=event.position,
            values={},
        )
    handler = _HANDLERS.get(kind)
    changes = handler(state, p, event) if handler is not None else {}
    return replace(state, last_seq=event.seq, last_position=event.position, **changes)


def fold(events: list[StoredEvent] | tuple[StoredEvent, ...]) -> RunState:
    """The state after all ``events`` of one run (in seq order)."""
    state: RunState | None = None
    for event in events:
        state = apply(state, event)
    if state is None:
        raise NotARunError("no events")
    return state


def fold_all(events: Iterable[StoredEvent]) -> dict[str, RunState]:
    """The state of every run in an event stream (in position order), by run id.

    Runs whose first event is not RunStarted (annotations of unknown runs) are skipped.
    """
    states: dict[str, RunState] = {}
    for event in events:
        current = states.get(event.run_id)
        if current is None and event.type != "RunStarted":
            continue
        states[event.run_id] = apply(current, event)
    return states


Changes = dict[str, Any]


def _steps(state: RunState, index: int, name: str, **changes: Any) -> tuple[StepState, ...]:
    """The run's steps with step ``index`` changed (or added)."""
    steps = state.steps
    for position, existing in enumerate(steps):
        if existing.index == index:
            return (*steps[:position], replace(existing, **changes), *steps[position + 1 :])
    return (*steps, replace(StepState(name=name, index=index), **changes))


def _step_started(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    existing = state.step(p["step_index"])
    started_at = existing.started_at if existing and existing.started_at else event.recorded_at
    steps = _steps(
        state,
        p["step_index"],
        p["step"],
        status="running",
        attempts=p.get("attempt", 1),
        started_at=started_at,
    )
    return {"status": "running", "steps": steps}


def _attempt_failed(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    existing = state.step(p["step_index"])
    failed = (existing.failed_attempts if existing else 0) + 1
    error_type = p.get("error_type") or f"validation:{p.get('layer')}:{p.get('check')}"
    steps = _steps(
        state,
        p["step_index"],
        p["step"],
        failed_attempts=failed,
        last_error=p.get("message") or error_type,
        last_error_type=error_type,
    )
    return {"steps": steps}


def _step_completed(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    steps = _steps(
        state,
        p["step_index"],
        p["step"],
        status="done",
        output=p.get("output", {}),
        output_summary=p.get("output_summary"),
        finished_at=event.recorded_at,
    )
    return {"steps": steps, "values": {**state.values, p["step"]: p.get("output", {})}}


def _step_failed(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    steps = _steps(
        state,
        p["step_index"],
        p["step"],
        status="failed",
        last_error=p.get("message") or p["error_type"],
        last_error_type=p["error_type"],
        finished_at=event.recorded_at,
    )
    return {"steps": steps}


def _model_called(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    tokens_in, tokens_out = p.get("input_tokens", 0), p.get("output_tokens", 0)
    cost = p.get("cost_usd", 0.0)
    changes: Changes = {
        "model_calls": state.model_calls + 1,
        "call_index": max(state.call_index, p["call_index"] + 1),
        "input_tokens": state.input_tokens + tokens_in,
        "output_tokens": state.output_tokens + tokens_out,
        "cost_usd": state.cost_usd + cost,
    }
    index = p.get("step_index")
    current = state.step(index) if index is not None else None
    if current is not None:
        changes["steps"] = _steps(
            state,
            current.index,
            current.name,
            input_tokens=current.input_tokens + tokens_in,
            output_tokens=current.output_tokens + tokens_out,
            cost_usd=current.cost_usd + cost,
            last_response=fingerprint("response", p.get("response")),
        )
    return changes


def _call_recorded(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    tools = state.tool_calls + (1 if event.type == "ToolCalled" else 0)
    return {"tool_calls": tools, "call_index": max(state.call_index, p["call_index"] + 1)}


def _approval_requested(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    if p["policy"] != "manual":
        return {}
    steps = _steps(state, p["step_index"], p["step"], status="awaiting_approval")
    return {"status": "awaiting_approval", "steps": steps}


def _approval_decided(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    status: StepStatus = "running" if p["approved"] else "rejected"
    last_error = None if p["approved"] else (p.get("reason") or "rejected at the gate")
    steps = _steps(
        state,
        p["step_index"],
        p["step"],
        status=status,
        approval=p["approved"],
        last_error=last_error,
    )
    return {"status": "running", "steps": steps}


def _budget_exceeded(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    return {"budget_exceeded": p["budget"]}


def _run_completed(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    return {"status": "completed", "output": p.get("output"), "ended_at": event.recorded_at}


def _run_failed(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    return {
        "status": "failed",
        "failure_step": p.get("step"),
        "failure_step_index": p.get("step_index"),
        "failure_type": p["error_type"],
        "failure_message": p.get("message"),
        "ended_at": event.recorded_at,
    }


def _run_aborted(state: RunState, p: dict[str, Any], event: StoredEvent) -> Changes:
    return {
        "status": "aborted",
        "failure_step": p.get("step"),
        "failure_step_index": p.get("step_index"),
        "failure_type": state.budget_exceeded or "aborted",
        "failure_message": p["reason"],
        "ended_at": event.recorded_at,
    }


_HANDLERS = {
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
