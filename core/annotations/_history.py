"""The history of a target's labels and notes: each annotation with every change made to it
(added, edited, removed), who made it and when, and what it read before and after.

The same fold as :func:`._fold.fold`, keeping the steps instead of only the result: an
annotation's last entry reads as :func:`._fold.fold` says it reads now, and one removed keeps
its history. Pure: no I/O here; :mod:`._read` reads the events.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from ..store import StoredEvent
from ._fold import ADDED, CHANGED, Annotation, added_from, edited_from
from ._models import Action, Change, Trail


def history(events: Iterable[StoredEvent]) -> list[Trail]:
    """Every annotation ``events`` add, in the order added, with its changes (other event
    types are skipped; an edit or removal of an id that is not current changes nothing)."""
    current: dict[str, Annotation] = {}
    kinds: dict[str, Literal["label", "note"]] = {}
    changes: dict[str, list[Change]] = {}
    for event in events:
        if event.type in ADDED:
            added = added_from(event)
            current[added.id], kinds[added.id] = added, added.kind
            changes[added.id] = [
                Change(action="added", by=added.by, at=added.at, label=added.label, note=added.note)
            ]
        elif event.type in CHANGED:
            target = str(event.payload.get("annotation"))
            before = current.get(target)
            if before is None:
                continue
            p = event.payload
            if event.type == "AnnotationRemoved":
                del current[target]
                who, label, note = p.get("removed_by"), None, None
            else:
                after = current[target] = edited_from(before, event)
                who, label, note = p.get("edited_by"), after.label, after.note
            action: Action = "removed" if event.type == "AnnotationRemoved" else "edited"
            changes[target].append(
                Change(
                    action=action,
                    by=who,
                    at=event.recorded_at,
                    label=label,
                    note=note,
                    was_label=before.label,
                    was_note=before.note,
                )
            )
    return [
        Trail(id=key, kind=kinds[key], changes=tuple(found), current=current.get(key))
        for key, found in changes.items()
    ]
