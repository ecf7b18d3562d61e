"""The run state's types: :class:`RunState` (article 001 §5.2) and its :class:`StepState`s,
frozen values that :mod:`.run_state` folds from a run's events."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

from ..errors import SteplogError

RunStatus = Literal["running", "completed", "failed", "aborted", "awaiting_approval"]
StepStatus = Literal["running", "done", "failed", "awaiting_approval", "rejected"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "aborted"})


class StepState(NamedTuple):
    """One step of a run: status, attempts, last error, output and its summary.

    A NamedTuple, not a SQLModel read model (issue 33 asked for one "if it does not slow hot
    paths"): every fold freezes each step of the run (``apply`` does so after every event), and
    a 16-field SQLModel costs 8.6 us to build even with ``model_construct`` (19.8 us validated)
    against 1.0 us for this tuple; on 40 seeded runs (2,745 events, 578 steps) whose whole fold
    takes 2.65 ms, that is +4.3 ms, +163 % (``timeit``, 2026-12-04 13:57 UTC, load 6.0; the
    performance guide, "Read models and the fold"). ``as_dict`` gives the JSON form. It is
    internal to the fold: a public reader hands a step out as
    :class:`steplog.projections.StepView`, inside the run's ``RunStateView``
    (:func:`steplog.projections.run_state_of`), made once per read.
    """

    name: str
    index: int  # type: ignore[assignment]  # shadows tuple.index, on purpose
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
    last_response: Any = None
    """The step's last model response (the harness compares attempts to detect loops)."""

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
    """Everything known about a run as of its last applied event: the fold's own value (a
    slotted dataclass, frozen after every event); readers hand it out as
    :class:`steplog.projections.RunStateView`."""

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
    session_id: str | None = None
    user_id: str | None = None
    gaps: tuple[str, ...] = ()
    """Known gaps in the run's source (an imported trace that lost spans): it may be incomplete."""
    rerun_of: str | None = None
    """The run this one re-runs (a regression check): like replays and forks, not evidence."""

    @property
    def is_derived(self) -> bool:
        """A replay, fork or rerun of another run: kept out of metrics, comparisons, failures."""
        return (
            self.replay_of is not None or self.forked_from is not None or self.rerun_of is not None
        )

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
            "run_id": self.run_id,
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
            "rerun_of": self.rerun_of,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "version": self.version,
        }


class NotARunError(SteplogError):
    """The events of a run id do not start with RunStarted."""
