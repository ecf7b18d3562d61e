"""Revising a stored run when its trace reads differently now: late spans, or a better mapping.

Runs are append-only. A revision appends ``RunRevised`` (carrying the new ``RunStarted``) and
then the run's events as they now read, with ids of their own; projections start the run over
at ``RunRevised``. Revising to what the run already says appends nothing, so re-running a
revision (``steplog reassemble`` twice) is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...events import ANNOTATION_TYPES, Event, RunRevised, RunStarted
from ...store import EventStore, NewEvent, StoredEvent
from ..ids import stable_event_id


@dataclass(frozen=True, slots=True)
class Revision:
    """What revising one run did: events appended (0 when it already read so)."""

    run_id: str
    appended: int
    revision: int


ANNOTATIONS = ANNOTATION_TYPES
"""What people add to a run: not part of what its trace says, so never compared or replaced."""


def current_reading(events: list[StoredEvent]) -> tuple[list[Event], int]:
    """The run as it reads now (its last revision, or all of it; annotations left out) and
    its revision number."""
    revision = 0
    start = 0
    started: Event | None = None
    for index, stored in enumerate(events):
        if stored.type == "RunRevised":
            revised = stored.to_event()
            assert isinstance(revised, RunRevised)
            revision, start, started = revised.revision, index + 1, revised.started
    rest = [e.to_event() for e in events[start:] if e.type not in ANNOTATIONS]
    return ([started, *rest] if started is not None else rest), revision


def revise(store: EventStore, run_id: str, events: list[NewEvent], reason: str) -> Revision:
    """Make ``run_id`` read as ``events`` (a full run, ``RunStarted`` first)."""
    stored = store.read_run(run_id)
    batch, revision = revision_batch(stored, run_id, events, reason)
    if batch:
        store.append_batch(run_id, batch, expected_version=len(stored))
    return Revision(run_id, len(batch), revision)


def revision_batch(
    stored: list[StoredEvent], run_id: str, events: list[NewEvent], reason: str
) -> tuple[list[NewEvent], int]:
    """What to append to a run holding ``stored`` so that it reads as ``events`` (nothing when
    it already does), and the revision number it then has."""
    reading, revision = current_reading(stored)
    wanted = [new.event for new in events]
    if reading == wanted:
        return [], revision
    started = wanted[0]
    if not isinstance(started, RunStarted):
        raise ValueError("a revised run starts with RunStarted")
    revision += 1
    first = events[0]
    moment = first.recorded_at
    millis = int(moment.timestamp() * 1000) if moment else 0
    batch = [
        NewEvent(
            RunRevised(revision=revision, reason=reason, started=started),
            event_id=stable_event_id(millis, run_id, "revised", revision),
            recorded_at=moment,
        )
    ]
    for new in events[1:]:
        when = new.recorded_at
        batch.append(
            NewEvent(
                new.event,
                event_id=stable_event_id(
                    int(when.timestamp() * 1000) if when else millis,
                    str(new.event_id),
                    "revision",
                    revision,
                ),
                recorded_at=when,
            )
        )
    return batch, revision
