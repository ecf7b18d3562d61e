"""The read model of one run's state as a reader hands it to a caller (``steplog show``, the
run page, a Python user): :class:`RunStateView` with its :class:`StepView`s, SQLModel read
models (no table, built on first use).

The fold itself keeps :class:`.run_types.RunState` (a slotted dataclass) and
:class:`.run_types.StepState` (a NamedTuple): ``apply`` freezes every step after every event,
where a SQLModel costs 8.6 us a step against 1.0 us (``StepState``'s docstring, the performance
guide). A view is made once per read, at the boundary (:meth:`RunStateView.of`), never inside
the fold.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ConfigDict
from sqlmodel import Field, SQLModel

from ..store import EventStore
from .run_state import as_of
from .run_types import NotARunError, RunState, StepState

_READ_CONFIG: Any = ConfigDict(defer_build=True)
_NOT_IN_JSON = {"seed", "input_tokens", "output_tokens"}


class _ReadModel(SQLModel):
    model_config = _READ_CONFIG


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when is not None else None


class StepView(_ReadModel):
    """One step of a run: status, attempts, last error, the output's summary, accounting."""

    name: str
    index: int
    status: str
    attempts: int
    last_error: str | None = None
    last_error_type: str | None = None
    output_summary: str | None = None
    finished_at: datetime | None = None
    tokens: int = 0
    cost_usd: float = 0.0

    @classmethod
    def of(cls, step: StepState) -> StepView:
        """The view of a folded step (unvalidated: the fold's values have the fields' types)."""
        return cls.model_construct(
            name=step.name,
            index=step.index,
            status=step.status,
            attempts=step.attempts,
            last_error=step.last_error,
            last_error_type=step.last_error_type,
            output_summary=step.output_summary,
            finished_at=step.finished_at,
            tokens=step.input_tokens + step.output_tokens,
            cost_usd=round(step.cost_usd, 6),
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (times in ISO 8601 with their offset)."""
        return {**self.model_dump(), "finished_at": _iso(self.finished_at)}


class RunFailure(_ReadModel):
    """Where and how a run failed."""

    step: str | None = None
    step_index: int | None = None
    error_type: str
    message: str | None = None


class RunStateView(_ReadModel):
    """Everything known about a run as of an event: the state object of ``steplog show``."""

    run_id: str
    scenario: str
    task_instance_id: str | None = None
    model_version: str
    status: str
    current_step: str | None = None
    steps: list[StepView] = Field(default_factory=list)
    run_mode: str
    retries: int
    tokens: int
    cost_usd: float
    failure: RunFailure | None = None
    first_step_correct: bool | None = None
    mid_run_errors: int
    mid_run_recovered: int
    replay_of: str | None = None
    forked_from: str | None = None
    rerun_of: str | None = None
    started_at: datetime
    ended_at: datetime | None = None
    version: int
    """The run's event count: what the next append must expect."""
    seed: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0

    @classmethod
    def of(cls, state: RunState) -> RunStateView:
        """The view of a folded run state, built unvalidated (``model_construct``): the fold's
        values already have the fields' types, and a store holding absurd numbers (a huge or
        non-finite count from an old unbounded writer) still shows, as it did before."""
        current = state.current_step
        failure = None
        if state.failure_type is not None:
            failure = RunFailure.model_construct(
                step=state.failure_step,
                step_index=state.failure_step_index,
                error_type=state.failure_type,
                message=state.failure_message,
            )
        return cls.model_construct(
            run_id=state.run_id,
            scenario=state.scenario,
            task_instance_id=state.task_instance_id,
            model_version=state.model_version,
            status=state.status,
            current_step=current.name if current else None,
            steps=[StepView.of(step) for step in state.steps],
            run_mode=state.run_mode,
            retries=state.retries,
            tokens=state.input_tokens + state.output_tokens,
            cost_usd=round(state.cost_usd, 6),
            failure=failure,
            first_step_correct=state.first_step_correct,
            mid_run_errors=state.mid_run_errors,
            mid_run_recovered=state.mid_run_recovered,
            replay_of=state.replay_of,
            forked_from=state.forked_from,
            rerun_of=state.rerun_of,
            started_at=state.started_at,
            ended_at=state.ended_at,
            version=state.version,
            seed=state.seed,
            input_tokens=state.input_tokens,
            output_tokens=state.output_tokens,
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``steplog show --json`` (what :meth:`RunState.as_dict` gives)."""
        data = self.model_dump(exclude=_NOT_IN_JSON)
        data["steps"] = [step.as_dict() for step in self.steps]
        data["started_at"] = self.started_at.isoformat()
        data["ended_at"] = _iso(self.ended_at)
        return data


def run_state_of(
    store: EventStore, run_id: str, *, step: int | None = None, position: int | None = None
) -> RunStateView:
    """Run ``run_id``'s state as of its last event, after step ``step`` ended, or as of log
    ``position`` (time travel, :func:`.run_state.as_of`); a one-line error for an unknown run."""
    events = store.read_run(run_id)
    if not events:
        raise NotARunError(f"no run {run_id!r} in {store.url}")
    return RunStateView.of(as_of(events, step=step, position=position))
