"""The failure library's pure folds: a run's failure signature and one signature's state.

:func:`failure_of` gives a failed run's signature; :func:`with_failure`, :func:`without_failure`,
:func:`with_label`, :func:`with_label_changed` and :func:`with_regression_set` fold one fact
into a :class:`SignatureState` (no I/O; :mod:`.library`'s runner reads the events and writes
the rows).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..store import StoredEvent
from .signature import Signature, signature_of
from .tally import FAILED, RunTally

if TYPE_CHECKING:  # a rebuild or a catch-up never builds a full run state: not imported
    from .run_state import RunState

FIXED_LABEL = "fixed"
SIGNATURE_STREAM = "signature:"
"""Labels given to a signature itself are appended to the stream ``signature:<id>``."""


def failure_of(state: RunState | RunTally) -> Signature | None:
    """The signature of a failed or aborted run (``None`` for any other)."""
    if isinstance(state, RunTally):
        return state.failure()  # the same, remembered while the failure stays the same
    if state.status not in FAILED:
        return None
    return signature_of(
        state.scenario,
        state.failure_step,
        state.failure_type or state.status,
        state.failure_message,
    )


@dataclass(frozen=True, slots=True)
class SignatureState:
    """One failure signature: counts, exemplars, labels, regression sets and status."""

    signature: str
    scenario: str
    step: str
    error_type: str
    message: str
    count: int
    counts_by_version: dict[str, int]
    first_seen_at: datetime
    last_seen_at: datetime
    first_position: int
    last_position: int
    exemplars: list[str]
    labels: list[dict[str, Any]]
    regression_sets: list[str]
    status: str
    fixed_at_position: int | None = None

    def row(self) -> dict[str, Any]:
        """The failure_signatures row (sharing this state's lists and dicts: never changed)."""
        return {name: getattr(self, name) for name in _SIGNATURE_FIELDS}


_SIGNATURE_FIELDS = tuple(f.name for f in fields(SignatureState))


def with_failure(
    current: SignatureState | None, signature: Signature, run: RunTally, position: int
) -> SignatureState:
    """``current`` after one more failed run (a signature marked fixed becomes regressed)."""
    at = run.ended_at or run.started_at
    if current is None:
        return SignatureState(
            signature=signature.id,
            scenario=signature.scenario,
            step=signature.step,
            error_type=signature.error_type,
            message=signature.message,
            count=1,
            counts_by_version={run.model_version: 1},
            first_seen_at=at,
            last_seen_at=at,
            first_position=position,
            last_position=position,
            exemplars=[run.run_id],
            labels=[],
            regression_sets=[],
            status="new",
        )
    counts = dict(current.counts_by_version)
    counts[run.model_version] = counts.get(run.model_version, 0) + 1
    exemplars = current.exemplars
    if run.run_id not in exemplars:  # the first three, then the two most recent
        exemplars = exemplars[:3] + [*exemplars[3:], run.run_id][-2:]
    regressed = current.status == "fixed" and position > (current.fixed_at_position or 0)
    return replace(
        current,
        count=current.count + 1,
        counts_by_version=counts,
        last_seen_at=max(current.last_seen_at, at),
        last_position=position,
        exemplars=exemplars,
        status="regressed" if regressed else current.status,
    )


def without_failure(current: SignatureState, run: RunTally) -> SignatureState:
    """``current`` without one failed run: the run was revised and fails differently now, or
    not at all (a signature left with no run is dropped when written)."""
    counts = dict(current.counts_by_version)
    left = counts.get(run.model_version, 0) - 1
    if left > 0:
        counts[run.model_version] = left
    else:
        counts.pop(run.model_version, None)
    exemplars = [run_id for run_id in current.exemplars if run_id != run.run_id]
    return replace(current, count=current.count - 1, counts_by_version=counts, exemplars=exemplars)


def with_label(current: SignatureState, event: StoredEvent) -> SignatureState:
    """``current`` after a FailureLabeled event (``fixed`` marks it fixed; others triage)."""
    p = event.payload
    label = {
        "label": p["label"],
        "note": p.get("note"),
        "by": p.get("labeled_by"),
        "at": event.recorded_at.isoformat(),
        "run_id": None if event.run_id.startswith(SIGNATURE_STREAM) else event.run_id,
        "id": str(event.event_id),
    }
    status, fixed_at = current.status, current.fixed_at_position
    if p["label"].strip().lower() == FIXED_LABEL:
        status, fixed_at = "fixed", event.position
    elif status == "new":
        status = "triaged"
    return replace(
        current, labels=[*current.labels, label], status=status, fixed_at_position=fixed_at
    )


def with_label_changed(current: SignatureState, event: StoredEvent) -> SignatureState:
    """``current`` after an AnnotationEdited or AnnotationRemoved of one of its labels (others,
    such as notes, leave it as it is). Status follows the labels left: a signature whose last
    label went is new again, one whose ``fixed`` label went is triaged (a regression stays)."""
    p = event.payload
    target = p["annotation"]
    if not any(item.get("id") == target for item in current.labels):
        return current
    labels: list[dict[str, Any]] = []
    for item in current.labels:
        if item.get("id") != target:
            labels.append(item)
        elif event.type == "AnnotationEdited":
            changed = {**item, "edited_by": p.get("edited_by")}
            changed["edited_at"] = event.recorded_at.isoformat()
            if p.get("label"):
                changed["label"] = p["label"]
            if p.get("note") is not None:
                changed["note"] = p["note"] or None
            labels.append(changed)
    fixed = any(item["label"].strip().lower() == FIXED_LABEL for item in labels)
    status, fixed_at = current.status, current.fixed_at_position
    if fixed and status != "fixed" and status != "regressed":
        status, fixed_at = "fixed", event.position
    elif not fixed and status == "fixed":
        status, fixed_at = "triaged", None
    if not labels and status == "triaged":
        status = "new"
    elif labels and status == "new":
        status = "triaged"
    return replace(current, labels=labels, status=status, fixed_at_position=fixed_at)


def with_regression_set(current: SignatureState, set_name: str) -> SignatureState:
    """``current`` with one of its samples in regression set ``set_name``."""
    if set_name in current.regression_sets:
        return current
    return replace(current, regression_sets=[*current.regression_sets, set_name])
