"""The read models of annotations that :mod:`steplog.annotations` hands a caller: SQLModel
read models (``SQLModel`` without a table, frozen, built on first use), beside
:class:`._fold.Annotation` (a label or note as it reads now).

The queue's items are made once per failed run with ``model_construct`` from the run summary's
columns, which already have the fields' types (no validator per run on a large queue).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import ConfigDict
from sqlmodel import Field, SQLModel

from ._fold import Annotation, TargetKind, stream_of

Action = Literal["added", "edited", "removed"]
Grouping = Literal["signature", "mode"]
_READ_CONFIG: Any = ConfigDict(frozen=True, defer_build=True)


class _ReadModel(SQLModel):
    model_config = _READ_CONFIG


class Change(_ReadModel):
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


class Trail(_ReadModel):
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


class QueueItem(_ReadModel):
    """One unlabelled failed run: where and how it failed."""

    run_id: str
    signature: str
    mode: str | None
    scenario: str
    model_version: str
    failed_step: str | None
    error_type: str | None
    message: str | None
    failed_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """The item as JSON."""
        return {
            "run_id": self.run_id,
            "signature": self.signature,
            "mode": self.mode,
            "scenario": self.scenario,
            "model_version": self.model_version,
            "failed_step": self.failed_step,
            "error_type": self.error_type,
            "message": self.message,
            "failed_at": self.failed_at.isoformat(),
        }


class QueueGroup(_ReadModel):
    """The unlabelled runs of one signature or mode, oldest first."""

    grouping: Grouping
    key: str
    items: tuple[QueueItem, ...]

    @property
    def oldest(self) -> datetime:
        """When the group's oldest unlabelled run failed."""
        return self.items[0].failed_at

    def as_dict(self) -> dict[str, Any]:
        """The group as JSON."""
        return {
            "grouping": self.grouping,
            "key": self.key,
            "size": len(self.items),
            "runs": [item.as_dict() for item in self.items],
        }


class Target(_ReadModel):
    """What an annotation is on: its kind, id, stream, and the signature it labels (if any)."""

    kind: TargetKind
    id: str
    signature: str | None

    @property
    def stream(self) -> str:
        """The stream its annotations are appended to."""
        return stream_of(self.kind, self.id)


class TargetLabels(_ReadModel):
    """The current labels and notes of several targets of one kind (``labels_for``): every
    target asked for is a key, with an empty list when it has none."""

    kind: TargetKind
    by_target: dict[str, list[Annotation]] = Field(default_factory=dict)

    def __getitem__(self, target: str) -> list[Annotation]:
        """``target``'s annotations, oldest first."""
        return self.by_target[target]
