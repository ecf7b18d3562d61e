"""What people add to a run after the fact: labels, notes, their edits and removals, and
promotion to a regression set."""

from __future__ import annotations

from pydantic import (
    Field,
)

from ._base import Event, catalogue

# --- annotations -----------------------------------------------------------------------------


@catalogue.register
class FailureLabeled(Event):
    """Someone labelled a failed run (and so its failure signature)."""

    label: str = Field(min_length=1)
    note: str | None = None
    labeled_by: str | None = None
    signature: str | None = None


@catalogue.register
class NoteAdded(Event):
    """Someone wrote a free-text note on a failed run, a signature or a failure mode."""

    note: str = Field(min_length=1)
    noted_by: str | None = None
    signature: str | None = None


@catalogue.register
class AnnotationEdited(Event):
    """A label or note was changed. ``annotation`` is the event id of the FailureLabeled or
    NoteAdded it changes; ``None`` fields are left as they were (``note=""`` clears a label's
    note). ``signature`` is the annotated signature, so the library folds it without a lookup."""

    annotation: str = Field(min_length=1)
    label: str | None = Field(default=None, min_length=1)
    note: str | None = None
    edited_by: str | None = None
    signature: str | None = None


@catalogue.register
class AnnotationRemoved(Event):
    """A label or note was withdrawn (the event id of the FailureLabeled or NoteAdded)."""

    annotation: str = Field(min_length=1)
    removed_by: str | None = None
    signature: str | None = None


@catalogue.register
class SampleAddedToRegressionSet(Event):
    """A failed run was promoted to a named regression set."""

    regression_set: str = Field(min_length=1)
    note: str | None = None
    added_by: str | None = None


ANNOTATION_TYPES = frozenset(
    {
        "FailureLabeled",
        "NoteAdded",
        "AnnotationEdited",
        "AnnotationRemoved",
        "SampleAddedToRegressionSet",
    }
)
"""What people add to a run's stream after the fact: replays, revisions and checks leave them
out of the run's own events."""
