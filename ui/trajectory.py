"""A run's events as a trajectory: steps, their attempts, and the calls made in each attempt.

Pure (no Streamlit): the Run detail page renders what :func:`trajectory` returns. Calls carry
``step_index`` but not the attempt; an attempt owns every event of its step between its
``StepStarted`` and the next one, which is how the harness, the recorder and both importers
write them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from steplog.events import ANNOTATION_TYPES
from steplog.store import StoredEvent

KINDS = {
    "ModelCalled": "model",
    "ToolCalled": "tool",
    "RandomDrawn": "random",
    "ClockRead": "clock",
}
FAILURES = ("StepAttemptFailed", "ValidationFailed", "StepFailed", "BudgetExceeded", "RunFailed")
ANNOTATIONS = ANNOTATION_TYPES  # people's labels, notes and edits: shown under Annotations


@dataclass(slots=True)
class Entry:
    """One event in an attempt: a call, a failure, a gate, the step's end."""

    event: StoredEvent
    kind: str  # model, tool, random, clock, failure, gate, completed, other
    title: str
    error: str | None = None

    @property
    def payload(self) -> dict[str, Any]:
        """The event's payload."""
        return self.event.payload


@dataclass(slots=True)
class Attempt:
    """One attempt at a step."""

    number: int
    entries: list[Entry] = field(default_factory=list)

    @property
    def errors(self) -> int:
        """Entries that are errors."""
        return sum(entry.error is not None for entry in self.entries)


@dataclass(slots=True)
class Step:
    """A step of the run with its attempts, in order."""

    index: int
    name: str
    status: str = "running"
    attempts: list[Attempt] = field(default_factory=list)
    fatal: bool = False  # the run failed (or was aborted) here

    @property
    def errors(self) -> int:
        """Error entries over all attempts."""
        return sum(attempt.errors for attempt in self.attempts)

    def attempt(self, number: int) -> Attempt:
        """The attempt ``number`` (created when first seen)."""
        for existing in self.attempts:
            if existing.number == number:
                return existing
        self.attempts.append(Attempt(number))
        return self.attempts[-1]


@dataclass(slots=True)
class Trajectory:
    """Steps in order, and the run-level events outside any step."""

    steps: list[Step]
    run_events: list[Entry]

    @property
    def errors(self) -> list[Entry]:
        """Every error entry, in event order."""
        found = [e for s in self.steps for a in s.attempts for e in a.entries if e.error]
        found += [e for e in self.run_events if e.error]
        return sorted(found, key=lambda e: e.event.seq)

    @property
    def fatal_step(self) -> Step | None:
        """The step the run failed or was aborted at (``None`` for a run that did not)."""
        return next((step for step in self.steps if step.fatal), None)

    @property
    def fatal_errors(self) -> list[Entry]:
        """The errors that ended the run: the fatal step's last attempt and the run's own."""
        step = self.fatal_step
        found = [e for e in step.attempts[-1].entries if e.error] if step and step.attempts else []
        found += [e for e in self.run_events if e.error]
        return sorted(found, key=lambda e: e.event.seq)

    @property
    def recovered_errors(self) -> list[Entry]:
        """Errors the run went on after: a retry, a later attempt, a step that completed."""
        fatal = {id(entry) for entry in self.fatal_errors}
        return [entry for entry in self.errors if id(entry) not in fatal]


def step_seconds(step: Step) -> float | None:
    """A step's duration: the time its calls took (their latencies, summed), else the time
    between its first and last recorded event (recorders that time no call)."""
    entries = [e for attempt in step.attempts for e in attempt.entries]
    timed = [e.payload.get("latency_ms") for e in entries if e.kind in ("model", "tool")]
    calls = [float(ms) for ms in timed if isinstance(ms, int | float)]
    if calls:
        return sum(calls) / 1000
    times = [e.event.recorded_at for e in entries]
    return (max(times) - min(times)).total_seconds() if times else None


def cut_at_step(events: Sequence[StoredEvent], step: int | None) -> Sequence[StoredEvent]:
    """The events up to the end of step ``step`` (what ``as_of(step=...)`` folds)."""
    if step is None:
        return events
    for index, event in enumerate(events):
        starts_next = event.type in ("StepStarted", "ApprovalRequested")
        if starts_next and event.payload.get("step_index", -1) > step:
            return events[:index]
    return events


def _entry(event: StoredEvent) -> Entry:
    p = event.payload
    kind = KINDS.get(event.type)
    if event.type == "ModelCalled":
        return Entry(event, "model", f"model {p.get('model')}", p.get("error") or None)
    if event.type == "ToolCalled":
        failed = p.get("status") == "error"
        error = f"{p.get('error_type') or 'error'}: {_short(p.get('result'))}" if failed else None
        return Entry(event, "tool", f"tool {p.get('tool')}", error)
    if kind is not None:
        return Entry(
            event, kind, f"{kind} {_short(p.get('kind') or '')} = {_short(p.get('value'))}"
        )
    if event.type in FAILURES:
        what = p.get("error_type") or p.get("check") or p.get("budget") or "failed"
        message = p.get("message") or (
            f"{p.get('used')} > {p.get('limit')}" if event.type == "BudgetExceeded" else ""
        )
        return Entry(event, "failure", event.type, f"{what}: {message}".rstrip(": "))
    if event.type == "RunAborted":
        return Entry(event, "failure", "RunAborted", f"aborted: {p.get('reason')}")
    if event.type in ("ApprovalRequested", "ApprovalDecided"):
        decided = p.get("approved")
        error = "rejected" if decided is False else None
        return Entry(event, "gate", event.type, error)
    if event.type == "StepCompleted":
        return Entry(event, "completed", f"completed: {_short(p.get('output_summary') or '')}")
    return Entry(event, "other", event.type)


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def trajectory(events: Sequence[StoredEvent]) -> Trajectory:
    """Group a run's events into steps and attempts."""
    steps: dict[int, Step] = {}
    current: dict[int, int] = {}  # step index -> attempt in progress
    early: dict[int, list[Entry]] = {}  # calls made for a step before it started (its clock)
    run_events: list[Entry] = []
    for event in events:
        p = event.payload
        index = p.get("step_index")
        if event.type == "RunStarted" or event.type in ANNOTATIONS:
            continue
        if event.type == "StepStarted" and index is not None:  # a step always has its index
            step = steps.setdefault(index, Step(index, p.get("step", f"step {index}")))
            number = int(p.get("attempt") or len(step.attempts) + 1)
            current[index] = number
            step.attempt(number).entries.extend(early.pop(index, []))
            continue
        entry = _entry(event)
        if index is None or event.type == "RunCompleted":
            run_events.append(entry)
            continue
        if index not in steps:
            if event.type in KINDS:
                early.setdefault(index, []).append(entry)
            else:
                run_events.append(entry)
            continue
        step = steps[index]
        number = p.get("attempt") or current.get(index, 1)
        step.attempt(int(number)).entries.append(entry)
        if event.type == "StepCompleted":
            step.status = "completed"
        elif event.type in ("StepFailed", "RunFailed"):
            step.status = "failed"  # a completion criterion fails a step that had completed
            step.fatal = step.fatal or event.type == "RunFailed"
        elif event.type == "RunAborted":
            step.status = "aborted"
            step.fatal = True
    run_events.extend(entry for pending in early.values() for entry in pending)
    run_events.sort(key=lambda entry: entry.event.seq)
    return Trajectory(sorted(steps.values(), key=lambda s: s.index), run_events)
