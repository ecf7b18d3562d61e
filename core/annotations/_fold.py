"""The pure fold of one target's annotation events into its current labels and notes.

An annotation is a ``FailureLabeled`` (a label, maybe with a note) or a ``NoteAdded`` (a
free-text note) event; its id is that event's id. ``AnnotationEdited`` and
``AnnotationRemoved`` name it by that id. Nothing is ever rewritten: the current annotations
are what the events fold to. No I/O here; :mod:`._read` reads the events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import ConfigDict
from sqlmodel import SQLModel

from ..projections.signature_fold import SIGNATURE_STREAM
from ..store import StoredEvent

MODE_STREAM = "mode:"
"""Labels and notes on a failure mode are appended to the stream ``mode:<id>``."""
ADDED = frozenset({"FailureLabeled", "NoteAdded"})
CHANGED = frozenset({"AnnotationEdited", "AnnotationRemoved"})
TargetKind = Literal["run", "signature", "mode"]
PREFIXES: dict[TargetKind, str] = {"run": "", "signature": SIGNATURE_STREAM, "mode": MODE_STREAM}


def kind_of(stream: str) -> TargetKind:
    """What a stream annotates: a signature, a failure mode or (any other stream) a run."""
    if stream.startswith(SIGNATURE_STREAM):
        return "signature"
    if stream.startswith(MODE_STREAM):
        return "mode"
    return "run"


def stream_of(kind: TargetKind, target_id: str) -> str:
    """The stream holding the annotations of ``target_id`` of ``kind``."""
    return PREFIXES[kind] + target_id


_FROZEN: Any = ConfigDict(frozen=True)


class Annotation(SQLModel):
    """A label or note as it reads now, with who wrote it and when (and who last changed it):
    a frozen SQLModel read model (``annotations_of``, ``labels_for``)."""

    model_config = _FROZEN
    id: str
    stream: str
    kind: Literal["label", "note"]
    label: str | None
    note: str | None
    by: str | None
    at: datetime
    signature: str | None
    edited_by: str | None = None
    edited_at: datetime | None = None

    @property
    def target_kind(self) -> TargetKind:
        """What it annotates: ``run``, ``signature`` or ``mode``."""
        return kind_of(self.stream)

    @property
    def target(self) -> str:
        """The run, signature or mode id it annotates."""
        return self.stream[len(PREFIXES[self.target_kind]) :]

    def as_dict(self) -> dict[str, Any]:
        """The annotation as JSON."""
        return {
            "id": self.id,
            "target_kind": self.target_kind,
            "target": self.target,
            "kind": self.kind,
            "label": self.label,
            "note": self.note,
            "by": self.by,
            "at": self.at.isoformat(),
            "signature": self.signature,
            "edited_by": self.edited_by,
            "edited_at": self.edited_at.isoformat() if self.edited_at else None,
        }


@dataclass(frozen=True, slots=True)
class Folded:
    """A target's annotations: the current ones in the order they were added, and the ids of
    those removed (with when), so a second removal is told apart from an unknown id."""

    current: dict[str, Annotation] = field(default_factory=dict)
    removed: dict[str, datetime] = field(default_factory=dict)


def added_from(event: StoredEvent) -> Annotation:
    """The annotation a ``FailureLabeled`` or ``NoteAdded`` event adds."""
    p = event.payload
    is_label = event.type == "FailureLabeled"
    return Annotation(
        id=str(event.event_id),
        stream=event.run_id,
        kind="label" if is_label else "note",
        label=p["label"] if is_label else None,
        note=p.get("note") or None,
        by=p.get("labeled_by") if is_label else p.get("noted_by"),
        at=event.recorded_at,
        signature=p.get("signature"),
    )


def edited_from(current: Annotation, event: StoredEvent) -> Annotation:
    """``current`` as an ``AnnotationEdited`` event leaves it."""
    p = event.payload
    label = p.get("label") if current.kind == "label" and p.get("label") else current.label
    note = current.note
    if p.get("note") is not None and (p["note"] or current.kind == "label"):
        note = p["note"] or None  # a note's text is never emptied; a label's note may be
    return current.model_copy(
        update={
            "label": label,
            "note": note,
            "edited_by": p.get("edited_by"),
            "edited_at": event.recorded_at,
        }
    )


def fold(events: Iterable[StoredEvent]) -> Folded:
    """The annotations ``events`` leave (other event types are skipped; an edit or removal of
    an id that is not current changes nothing). ``events`` are read, never changed."""
    current: dict[str, Annotation] = {}
    removed: dict[str, datetime] = {}
    for event in events:
        if event.type in ADDED:
            current[str(event.event_id)] = added_from(event)
        elif event.type in CHANGED:
            target = str(event.payload.get("annotation"))
            if target not in current:
                continue
            if event.type == "AnnotationRemoved":
                del current[target]
                removed[target] = event.recorded_at
            else:
                current[target] = edited_from(current[target], event)
    return Folded(current, removed)
