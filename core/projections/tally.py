"""A run's summary as a compact fold over driver rows: what the library projection keeps.

:mod:`.run_state` folds everything a run does (outputs, step accounting, working values); the
library's summary row needs a fraction of it. :class:`RunTally` keeps only that fraction, folds
driver rows (:meth:`~steplog.store.EventStore.page_rows`) without building an event object per
row, and decodes a payload only for the event types that change a summary (a tool call, a clock
read or a random draw changes none). Its summary equals the one of the full
:func:`~.run_state.fold` for any prefix of any run (checked by a test over every scenario).

A tally is mutable and private to the projection's runner: it is folded in place, page by page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from pydantic_core import from_json

from .._limits import saturate
from ..store import EventStore, RawRow, recorded_at_of
from .signature import Signature, signature_of

FAILED = frozenset({"failed", "aborted"})
TERMINAL = frozenset({"completed", "failed", "aborted"})
# a step: [status, attempts, failed attempts]
STATUS, ATTEMPTS, FAILED_ATTEMPTS = 0, 1, 2


def _as_is(moment: datetime) -> datetime:
    return moment


class RunTally:
    """What a run summary needs of a run, as of its last folded event."""

    __slots__ = (
        "_failure",
        "agent",
        "agent_version",
        "budget_exceeded",
        "cost_usd",
        "ended_at",
        "failure_message",
        "failure_step",
        "failure_step_index",
        "failure_type",
        "fork_step",
        "forked_from",
        "incomplete",
        "input_tokens",
        "last_position",
        "model_version",
        "output_tokens",
        "planned",
        "replay_of",
        "rerun_of",
        "run_id",
        "scenario",
        "seed",
        "session_id",
        "source",
        "started_at",
        "status",
        "steps",
        "task_instance_id",
        "task_type",
    )
    run_id: str
    scenario: str
    task_instance_id: str | None
    task_type: str | None
    model_version: str
    agent: str
    agent_version: str
    seed: int | None
    source: str
    status: str
    planned: int
    steps: dict[int, list[Any]]
    failure_step: str | None
    failure_step_index: int | None
    failure_type: str | None
    failure_message: str | None
    budget_exceeded: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    started_at: datetime
    ended_at: datetime | None
    replay_of: str | None
    forked_from: str | None
    fork_step: int | None
    rerun_of: str | None
    session_id: str | None
    incomplete: bool
    last_position: int
    _failure: tuple[tuple[Any, ...], Signature | None]
    """The last signature computed, with what it was computed from."""

    @classmethod
    def start(cls, run_id: str, p: dict[str, Any], started_at: datetime, position: int) -> RunTally:
        """A run as of its RunStarted (the same defaults as the full fold's)."""
        tally = cls.__new__(cls)
        tally.run_id = run_id
        tally.started_at = started_at
        tally.last_position = position
        tally._failure = ((), None)
        tally._reset(p)
        return tally

    def _reset(self, p: dict[str, Any]) -> None:
        """Everything but the run's identity, start time and position, from a RunStarted."""
        self.scenario = p["scenario"]
        self.model_version = p["model_version"]
        self.agent = p["agent"]
        self.agent_version = p.get("agent_version", "1")
        self.task_instance_id = p.get("task_instance_id")
        self.task_type = p.get("task_type")
        self.seed = p.get("seed")
        self.planned = len(p.get("planned_steps") or ())
        self.source = p.get("source", "harness")
        self.replay_of = p.get("replay_of")
        self.forked_from = p.get("forked_from")
        self.fork_step = p.get("fork_step")
        self.session_id = p.get("session_id")
        self.incomplete = bool(p.get("gaps"))
        self.rerun_of = p.get("rerun_of")
        self.status = "running"
        self.steps = {}
        self.failure_step = self.failure_step_index = None
        self.failure_type = self.failure_message = None
        self.budget_exceeded = None
        self.input_tokens = self.output_tokens = 0
        self.cost_usd = 0.0
        self.ended_at = None

    def copy(self) -> RunTally:
        """An independent copy (steps included)."""
        twin = RunTally.__new__(RunTally)
        for name in RunTally.__slots__:
            setattr(twin, name, getattr(self, name))
        twin.steps = {index: list(step) for index, step in self.steps.items()}
        return twin

    @property
    def is_derived(self) -> bool:
        """A replay, fork or rerun of another run: kept out of the failure library."""
        return (
            self.replay_of is not None or self.forked_from is not None or self.rerun_of is not None
        )

    @property
    def is_terminal(self) -> bool:
        """Completed, failed or aborted."""
        return self.status in TERMINAL

    def failure(self) -> Signature | None:
        """The failure signature of a failed or aborted run (``None`` for any other)."""
        if self.status not in FAILED:
            return None
        step, kind, message = (
            self.failure_step,
            self.failure_type or self.status,
            self.failure_message,
        )
        key = (self.scenario, step, kind, message)
        known, found = self._failure
        if known != key:  # a page asks up to three times: normalising the message is the cost
            found = signature_of(self.scenario, step, kind, message)
            self._failure = (key, found)
        return found

    def signature(self) -> str | None:
        """The failure signature id of a failed or aborted run (``None`` for any other)."""
        found = self.failure()
        return None if found is None else found.id

    def summary(self) -> dict[str, Any]:
        """The run summary row."""
        return dict(zip(SUMMARY_COLUMNS, self.summary_values(), strict=True))

    def summary_values(self, stamp: Callable[[datetime], Any] = _as_is) -> tuple[Any, ...]:
        """The run summary row's values, in the order of :data:`SUMMARY_COLUMNS` (what a page's
        insert binds: no dict per row), its times passed through ``stamp``."""
        steps = list(self.steps.values())
        done = retries = mid_errors = mid_recovered = 0
        for number, (status, attempts, failed_attempts) in enumerate(steps):
            if status == "done":
                done += 1
            if attempts > 1:
                retries += attempts - 1
            if number and failed_attempts > 0:
                mid_errors += 1
                if status == "done":
                    mid_recovered += 1
        first = steps[0] if steps else None
        first_correct = None
        if first is not None and first[STATUS] in ("done", "failed"):
            first_correct = first[STATUS] == "done" and first[FAILED_ATTEMPTS] == 0
        ended = self.ended_at
        return (
            self.run_id,
            self.scenario,
            self.task_instance_id,
            self.task_type,
            self.model_version,
            self.agent,
            self.agent_version,
            self.seed,
            self.source,
            self.status,
            self.planned or len(steps),
            done,
            self.failure_step,
            self.failure_step_index,
            self.failure_type,
            self.failure_message,
            self.signature(),
            retries,
            saturate(self.input_tokens + self.output_tokens),  # a bounded total: sums fit
            round(self.cost_usd, 8),
            (ended - self.started_at).total_seconds() if ended else None,
            first_correct,
            mid_errors,
            mid_recovered,
            self.replay_of,
            self.forked_from,
            self.fork_step,
            self.rerun_of,
            self.session_id,
            self.incomplete,
            stamp(self.started_at),
            None if ended is None else stamp(ended),
            self.last_position,
        )


SUMMARY_COLUMNS = (
    "run_id",
    "scenario",
    "task_instance_id",
    "task_type",
    "model_version",
    "agent",
    "agent_version",
    "seed",
    "source",
    "status",
    "steps_planned",
    "steps_done",
    "failed_step",
    "failed_step_index",
    "error_type",
    "failure_message",
    "signature",
    "retries",
    "tokens",
    "cost_usd",
    "duration_s",
    "first_step_correct",
    "mid_run_errors",
    "mid_run_recovered",
    "replay_of",
    "forked_from",
    "fork_step",
    "rerun_of",
    "session_id",
    "incomplete",
    "started_at",
    "ended_at",
    "last_position",
)
"""The columns of a run summary row, in the order of :meth:`RunTally.summary_values`."""


def tally_rows(store: EventStore, tally: RunTally | None, rows: Sequence[RawRow]) -> RunTally:
    """``tally`` with one run's driver ``rows`` folded in (in seq order); ``None`` starts the
    run at its first row, which must be its RunStarted. Returns the (same or new) tally."""
    if not rows:
        if tally is None:
            raise ValueError("no events")
        return tally
    payload_of = store.payload_of
    versions = PAYLOAD_VERSIONS
    handlers = _HANDLERS
    if tally is None:
        row = rows[0]
        if row[4] != "RunStarted":
            raise ValueError(f"run {row[2]!r} does not start with RunStarted ({row[4]})")
        p = row[7]
        if row[5] < versions["RunStarted"]:
            p = payload_of(row[4], row[5], p)
        elif type(p) is str:
            p = from_json(p)
        tally = RunTally.start(row[2], p, recorded_at_of(row[6]), row[0])
        rows = rows[1:]
    for row in rows:  # the hot loop of every fold: the commonest types are handled inline
        type_name = row[4]
        handler = handlers.get(type_name)
        if handler is None:
            continue  # its payload changes no summary: never decoded
        p = row[7]
        if row[5] < versions[type_name]:  # older: the store's upcasters bring it up to date
            p = payload_of(type_name, row[5], p)
        elif type(p) is str:
            p = from_json(p)
        if type_name == "ModelCalled":
            tally.input_tokens += p.get("input_tokens", 0)
            tally.output_tokens += p.get("output_tokens", 0)
            tally.cost_usd += p.get("cost_usd", 0.0)
        elif type_name == "StepStarted":
            step = tally.steps.get(p["step_index"])
            if step is None:
                tally.steps[p["step_index"]] = ["running", p.get("attempt", 1), 0]
            else:
                step[STATUS] = "running"
                step[ATTEMPTS] = p.get("attempt", 1)
            tally.status = "running"
        elif type_name == "StepCompleted":
            step = tally.steps.get(p["step_index"])
            if step is None:
                tally.steps[p["step_index"]] = ["done", 0, 0]
            else:
                step[STATUS] = "done"
        else:
            handler(tally, p, row)
    tally.last_position = rows[-1][0] if rows else tally.last_position
    return tally


def _step(run: RunTally, p: dict[str, Any]) -> list[Any]:
    index = p["step_index"]
    found = run.steps.get(index)
    if found is None:
        found = run.steps[index] = ["running", 0, 0]
    return found


def _step_started(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    step = _step(run, p)
    step[STATUS] = "running"
    step[ATTEMPTS] = p.get("attempt", 1)
    run.status = "running"


def _attempt_failed(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    _step(run, p)[FAILED_ATTEMPTS] += 1


def _step_completed(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    _step(run, p)[STATUS] = "done"


def _step_failed(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    _step(run, p)[STATUS] = "failed"


def _model_called(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    run.input_tokens += p.get("input_tokens", 0)
    run.output_tokens += p.get("output_tokens", 0)
    run.cost_usd += p.get("cost_usd", 0.0)


def _approval_requested(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    if p["policy"] == "manual":
        _step(run, p)[STATUS] = "awaiting_approval"
        run.status = "awaiting_approval"


def _approval_decided(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    _step(run, p)[STATUS] = "running" if p["approved"] else "rejected"
    run.status = "running"


def _budget_exceeded(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    run.budget_exceeded = p["budget"]


def _run_completed(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    run.status = "completed"
    run.ended_at = recorded_at_of(row[6])


def _run_failed(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    run.status = "failed"
    run.failure_step = p.get("step")
    run.failure_step_index = p.get("step_index")
    run.failure_type = p["error_type"]
    run.failure_message = p.get("message")
    run.ended_at = recorded_at_of(row[6])


def _run_aborted(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    run.status = "aborted"
    run.failure_step = p.get("step")
    run.failure_step_index = p.get("step_index")
    run.failure_type = run.budget_exceeded or "aborted"
    run.failure_message = p["reason"]
    run.ended_at = recorded_at_of(row[6])


def _run_revised(run: RunTally, p: dict[str, Any], row: RawRow) -> None:
    """Start over from the revised RunStarted; the run's identity and start time stay."""
    run._reset(p["started"])


_HANDLERS: dict[str, Callable[[RunTally, dict[str, Any], RawRow], None]] = {
    "RunRevised": _run_revised,
    "StepStarted": _step_started,
    "StepAttemptFailed": _attempt_failed,
    "ValidationFailed": _attempt_failed,
    "StepCompleted": _step_completed,
    "StepFailed": _step_failed,
    "ModelCalled": _model_called,
    "ApprovalRequested": _approval_requested,
    "ApprovalDecided": _approval_decided,
    "BudgetExceeded": _budget_exceeded,
    "RunCompleted": _run_completed,
    "RunFailed": _run_failed,
    "RunAborted": _run_aborted,
}
"""Only the event types that change a summary: the others' payloads are never decoded."""

PAYLOAD_VERSIONS: dict[str, int] = {
    "RunStarted": 4,
    "RunRevised": 1,
    "StepStarted": 2,
    "StepAttemptFailed": 2,
    "ValidationFailed": 1,
    "StepCompleted": 1,
    "StepFailed": 2,
    "ModelCalled": 3,
    "ApprovalRequested": 1,
    "ApprovalDecided": 1,
    "BudgetExceeded": 1,
    "RunCompleted": 1,
    "RunFailed": 2,
    "RunAborted": 1,
}
"""The schema version of each payload the tally reads: the version the catalogue writes today (a
test keeps the two equal). A row at it is decoded here; an older one is upcast by the store. So a
fold whose rows are all current never loads the event models (importing them costs ~0.15 s of
CPU: a fifth of a rebuild of 100,000 events, most of a small catch-up)."""
