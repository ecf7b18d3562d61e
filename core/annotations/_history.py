"""The history of a target's labels and notes: each annotation with every change made to it
(added, edited, removed), who made it and when, and what it read before and after.

The same fold as :func:`._fold.fold`, keeping the steps instead of only the result: an
annotation's last entry reads as :func:`._fold.fold` says it reads now, and one removed keeps
its history. Pure: no I/O here; :mod:`._read` reads the events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ..store import StoredEvent
from ._fold import ADDED, CHANGED, Annotation, added_from, edited_from

Action = Literal["added", "edited", "removed"]


@dataclass(frozen=True, slots=True)
class Change:
    """One thing done to an annotation: what, by whom, when, and its label and note before
    and after (``None`` before it was added)."""

    action: Action
    by: str | None
    at: datetime
    label: str | None
    note: str | None
    was_label: str | None = None
    was_note: str | None = None

    @property
    def sentence(self) -> str:
        """The change in words: ``edited by bo at 2026-01-01 10:00 UTC: label 'a' -> 'b'``."""
        head = f"{self.action} by {self.by or 'someone'} at {self.at:%Y-%m-%d %H:%M} UTC"
        parts = []
        if self.action == "added":
            parts = [f"{name} {value!r}" for name, value in self._now() if value]
        elif self.action == "edited":
            for (name, now), was in zip(self._now(), (self.was_label, self.was_note), strict=True):
                if now != was:
                    parts.append(f"{name} {was or ''!r} -> {now or ''!r}")
        return head + (": " + "; ".join(parts) if parts else "")

    def _now(self) -> tuple[tuple[str, str | None], tuple[str, str | None]]:
        return ("label", self.label), ("note", self.note)

    def as_dict(self) -> dict[str, Any]:
        """The change as JSON."""
        return {
            "action": self.action,
            "by": self.by,
            "at": self.at.isoformat(),
            "label": self.label,
            "note": self.note,
            "was_label": self.was_label,
            "was_note": self.was_note,
        }


@dataclass(frozen=True, slots=True)
class Trail:
    """One annotation's history: its id and kind, its changes oldest first, whether it was
    removed, and how it reads now (``None`` once removed)."""

    id: str
    kind: Literal["label", "note"]
    changes: tuple[Change, ...]
    current: Annotation | None

    @property
    def removed(self) -> bool:
        """Whether it was withdrawn."""
        return self.current is None


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
            changes[added.id] = [Change("added", added.by, added.at, added.label, added.note)]
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
                Change(action, who, event.recorded_at, label, note, before.label, before.note)
            )
    return [
        Trail(key, kinds[key], tuple(found), current.get(key)) for key, found in changes.items()
    ]
