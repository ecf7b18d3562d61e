"""Annotating failures: labels and notes, and promotion to regression sets.

Annotations are events like any other: ``FailureLabeled`` on the failed run's stream (or on
``signature:<id>`` when a whole signature is labelled) and ``SampleAddedToRegressionSet`` on the
run's stream. The library projection folds them into signature status and set membership.
"""

from __future__ import annotations

from .errors import SteplogError
from .events import FailureLabeled, SampleAddedToRegressionSet
from .projections.queries import get_failure, refresh, run_summary
from .projections.signature_fold import SIGNATURE_STREAM
from .store import EventStore

MAX_LABEL = 100


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
        if run["signature"] is None:
            raise SteplogError(
                f"run {target!r} is {run['status']}, not failed: only failures are labelled"
            )
        event = FailureLabeled(label=cleaned, note=note, labeled_by=by, signature=run["signature"])
        store.append(target, [event])
        signature = str(run["signature"])
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
        if run["signature"] is None:
            raise SteplogError(f"run {run_id!r} is {run['status']}, not failed")
    for run_id in run_ids:
        store.append(
            run_id, [SampleAddedToRegressionSet(regression_set=cleaned, note=note, added_by=by)]
        )
    refresh(store)
    return len(run_ids)
