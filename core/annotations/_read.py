"""Reading annotations: a target's current labels and notes, one annotation by id, and the
labels of many targets of one kind at once (what a page of modes or signatures shows)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from sqlalchemy import select

from ..errors import SteplogError
from ..models import events_table
from ..store import EventStore
from ._fold import ADDED, CHANGED, Annotation, Folded, TargetKind, fold, stream_of
from ._history import history
from ._models import TargetLabels, Trail

_EVENTS = events_table.c


def folded(store: EventStore, stream: str) -> tuple[Folded, int]:
    """The fold of ``stream``'s annotation events, and the stream's version (its event count,
    for an append that must not race a concurrent edit)."""
    events = store.read_run(stream)
    wanted = ADDED | CHANGED
    return fold(e for e in events if e.type in wanted), len(events)


def annotations_of(store: EventStore, stream: str) -> list[Annotation]:
    """The current labels and notes on ``stream`` (a run id, ``signature:<id>`` or
    ``mode:<id>``), oldest first."""
    return list(folded(store, stream)[0].current.values())


def history_of(store: EventStore, stream: str) -> list[Trail]:
    """Every label and note ever on ``stream`` (removed ones too) with who added, edited and
    removed it and when, oldest first."""
    wanted = ADDED | CHANGED
    return history(e for e in store.read_run(stream) if e.type in wanted)


def labels_for(store: EventStore, kind: TargetKind, ids: Iterable[str]) -> TargetLabels:
    """Current annotations of each of ``ids`` (runs, signatures or modes, as ``kind`` says):
    every id given is a key, with an empty list when it has none."""
    found = {target: annotations_of(store, stream_of(kind, target)) for target in ids}
    return TargetLabels(kind=kind, by_target=found)


def stream_of_annotation(store: EventStore, annotation_id: str) -> tuple[str, str]:
    """The stream holding annotation ``annotation_id`` and the id as stored; a clear error
    when no label or note has that id."""
    try:
        key = uuid.UUID(annotation_id.strip())
    except ValueError:
        raise SteplogError(
            f"no annotation {annotation_id!r}: an annotation id is the full id that "
            "`steplog annotations list` shows"
        ) from None
    with store.engine.connect() as conn:
        row = conn.execute(
            select(_EVENTS.run_id, _EVENTS.type).where(_EVENTS.event_id == key)
        ).first()
    if row is None or row.type not in ADDED:
        raise SteplogError(f"no annotation {annotation_id!r}")
    return str(row.run_id), str(key)
