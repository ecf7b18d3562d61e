"""Annotating failures: labels and notes (added, edited, removed), the queue of failures no one
has labelled yet, and promotion to regression sets.

Annotations are events like any other: ``FailureLabeled`` (a label, maybe with a note) or
``NoteAdded`` on the failed run's stream, on ``signature:<id>`` for a whole signature or on
``mode:<id>`` for a failure mode; ``AnnotationEdited`` and ``AnnotationRemoved`` name the
annotation they change by its event id, on the same stream. :func:`annotations_of` folds a
target's events into what reads now, :func:`history_of` into who added, edited and removed
what and when; the library projection folds the labels into signature
status. ``SampleAddedToRegressionSet`` on a run's stream puts it in a regression set.

What the readers return are SQLModel read models (frozen): :class:`Annotation`, and in
:mod:`._models` :class:`Trail` and :class:`Change` (the history), :class:`QueueGroup` and
:class:`QueueItem` (the queue), :class:`Target`. The fold's own state (``_fold.Folded``) is
internal.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import SteplogError
from ..events import (
    AnnotationEdited,
    AnnotationRemoved,
    Event,
    FailureLabeled,
    NoteAdded,
    SampleAddedToRegressionSet,
)
from ..projections.queries import get_failure, refresh, run_summary
from ..projections.signature_fold import SIGNATURE_STREAM
from ..store import EventStore, NewEvent
from ._fold import MODE_STREAM, Annotation, TargetKind, kind_of, stream_of
from ._history import history
from ._models import Change, QueueGroup, QueueItem, Target, TargetLabels, Trail
from ._queue import unlabelled
from ._read import annotations_of, folded, history_of, labels_for, stream_of_annotation

__all__ = [
    "MAX_LABEL",
    "MAX_NOTE",
    "MODE_STREAM",
    "Annotation",
    "Change",
    "ModeLookup",
    "QueueGroup",
    "QueueItem",
    "Target",
    "TargetKind",
    "TargetLabels",
    "Trail",
    "add_to_regression_set",
    "annotate",
    "annotations_of",
    "edit",
    "history",
    "history_of",
    "kind_of",
    "label",
    "labels_for",
    "remove",
    "resolve",
    "stream_of",
    "unlabelled",
]

MAX_LABEL = 100
MAX_NOTE = 4000
ModeLookup = Callable[[str], str | None]
"""Maps a mode id (or a unique prefix of one) to the full id, ``None`` when there is no such
mode. Failure modes live a layer above annotations: callers that can cluster pass this in."""


def _clean_label(label: str) -> str:
    cleaned = label.strip()
    if not cleaned or len(cleaned) > MAX_LABEL:
        raise SteplogError(f"a label must be 1 to {MAX_LABEL} characters, not {label!r}")
    return cleaned


def _clean_note(note: str) -> str:
    cleaned = note.strip()
    if not cleaned or len(cleaned) > MAX_NOTE:
        shown = note if len(note) <= 40 else note[:40] + "..."
        raise SteplogError(f"a note must be 1 to {MAX_NOTE} characters, not {shown!r}")
    return cleaned


def resolve(store: EventStore, target: str, *, mode_of: ModeLookup | None = None) -> Target:
    """The failed run, failure signature (``signature:<id>``, the prefix optional) or failure
    mode (``mode:<id>``) named by ``target``; a clear error for anything else."""
    text = target.strip()
    if text.startswith(MODE_STREAM):
        wanted = text[len(MODE_STREAM) :]
        found = mode_of(wanted) if mode_of is not None and wanted else wanted or None
        if found is None:
            raise SteplogError(f"no failure mode {wanted!r}; list them with steplog modes")
        return Target(kind="mode", id=found, signature=None)
    refresh(store)
    if not text.startswith(SIGNATURE_STREAM):
        run = run_summary(store, text)
        if run is not None:
            if run.signature is None:
                raise SteplogError(
                    f"run {text!r} is {run.status}, not failed: only failures are annotated"
                )
            return Target(kind="run", id=text, signature=str(run.signature))
    wanted = text.removeprefix(SIGNATURE_STREAM)
    if not wanted:
        raise SteplogError("name a failed run, a signature or mode:<id> to annotate")
    try:
        signature = get_failure(store, wanted).signature
    except SteplogError:
        raise SteplogError(
            f"no failed run or failure signature {wanted!r}; list them with steplog failures"
        ) from None
    return Target(kind="signature", id=signature, signature=signature)


def _current(store: EventStore, annotation_id: str) -> tuple[Annotation, int]:
    """Annotation ``annotation_id`` as it reads now, and its stream's version."""
    stream, key = stream_of_annotation(store, annotation_id)
    state, version = folded(store, stream)
    if key in state.removed:
        raise SteplogError(
            f"annotation {annotation_id} was removed at {state.removed[key]:%Y-%m-%d %H:%M:%S}"
        )
    return state.current[key], version


def _appended(store: EventStore, stream: str, event: Event, version: int | None) -> str:
    """Append ``event`` to ``stream`` (if it is still at ``version``: a concurrent change is an
    error, never lost), refresh the library; return the event's id."""
    new = NewEvent(event)
    store.append(stream, [new], expected_version=version)
    refresh(store)
    return str(new.event_id)


def annotate(
    store: EventStore,
    target: str,
    *,
    label: str | None = None,
    note: str | None = None,
    by: str | None = None,
    mode_of: ModeLookup | None = None,
) -> Annotation:
    """Add a label (with an optional note) or, without a label, a free-text note to a failed
    run, a signature or a failure mode; returns the annotation added."""
    if label is None and note is None:
        raise SteplogError("give a label, a note or both")
    cleaned_label = None if label is None else _clean_label(label)
    cleaned_note = None if note is None else _clean_note(note)
    where = resolve(store, target, mode_of=mode_of)
    event: Event
    if cleaned_label is not None:
        event = FailureLabeled(
            label=cleaned_label, note=cleaned_note, labeled_by=by, signature=where.signature
        )
    else:
        event = NoteAdded(note=str(cleaned_note), noted_by=by, signature=where.signature)
    added = _appended(store, where.stream, event, None)
    return folded(store, where.stream)[0].current[added]


def edit(
    store: EventStore,
    annotation_id: str,
    *,
    label: str | None = None,
    note: str | None = None,
    by: str | None = None,
) -> Annotation:
    """Change a label's text or note, or a note's text; returns the annotation as it reads now.
    ``note=""`` clears a label's note (a note's own text cannot be emptied: remove it)."""
    if label is None and note is None:
        raise SteplogError("give a new label, a new note or both")
    current, version = _current(store, annotation_id)
    if label is not None and current.kind == "note":
        raise SteplogError(f"annotation {current.id} is a note: it has no label to change")
    cleaned_label = None if label is None else _clean_label(label)
    cleaned_note = note
    if note is not None and (note.strip() or current.kind == "note"):
        cleaned_note = _clean_note(note)
    elif note is not None:
        cleaned_note = ""
    if cleaned_label in (None, current.label) and cleaned_note in (None, current.note or ""):
        raise SteplogError(f"annotation {current.id} already reads so: nothing to change")
    event = AnnotationEdited(
        annotation=current.id,
        label=cleaned_label,
        note=cleaned_note,
        edited_by=by,
        signature=current.signature,
    )
    _appended(store, current.stream, event, version)
    return folded(store, current.stream)[0].current[current.id]


def remove(store: EventStore, annotation_id: str, *, by: str | None = None) -> Annotation:
    """Withdraw a label or note; returns it as it read before. Removing it again is an error."""
    current, version = _current(store, annotation_id)
    event = AnnotationRemoved(annotation=current.id, removed_by=by, signature=current.signature)
    _appended(store, current.stream, event, version)
    return current


def label(
    store: EventStore, target: str, *, label: str, note: str | None = None, by: str | None = None
) -> str:
    """Label a failed run or a failure signature; returns the labelled signature."""
    cleaned = label.strip()
    if not cleaned or len(cleaned) > MAX_LABEL:
        raise SteplogError(f"a label must be 1 to {MAX_LABEL} characters, not {label!r}")
    refresh(store)
    run = run_summary(store, target)
    if run is not None:
        if run.signature is None:
            raise SteplogError(
                f"run {target!r} is {run.status}, not failed: only failures are labelled"
            )
        event = FailureLabeled(label=cleaned, note=note, labeled_by=by, signature=run.signature)
        store.append(target, [event])
        signature = str(run.signature)
    else:
        signature = get_failure(store, target).signature
        event = FailureLabeled(label=cleaned, note=note, labeled_by=by, signature=signature)
        store.append(SIGNATURE_STREAM + signature, [event])
    refresh(store)
    return signature


def add_to_regression_set(
    store: EventStore,
    name: str,
    run_ids: list[str],
    *,
    note: str | None = None,
    by: str | None = None,
) -> int:
    """Promote failed runs to regression set ``name``; returns how many were added."""
    cleaned = name.strip()
    if not cleaned or len(cleaned) > 200:
        raise SteplogError(f"a regression set name must be 1 to 200 characters, not {name!r}")
    run_ids = list(dict.fromkeys(run_ids))  # naming a run twice adds it once
    if not run_ids:
        raise SteplogError("name at least one run to add")
    refresh(store)
    for run_id in run_ids:  # check them all before adding any
        run = run_summary(store, run_id)
        if run is None:
            raise SteplogError(f"no run {run_id!r}")
        if run.signature is None:
            raise SteplogError(f"run {run_id!r} is {run.status}, not failed")
    for run_id in run_ids:
        store.append(
            run_id, [SampleAddedToRegressionSet(regression_set=cleaned, note=note, added_by=by)]
        )
    refresh(store)
    return len(run_ids)
