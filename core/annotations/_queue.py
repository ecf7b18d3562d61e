"""The annotation queue: failed runs no one has labelled yet, grouped per signature or per
failure mode, the largest group first (ties: the oldest failure first), each group oldest first.

A failed run leaves the queue when it carries a current label, or its signature or its failure
mode does (notes do not count: a note is not a verdict). Replays, forks and reruns are not
queued: they are experiments on a failure, not failures of their own. :func:`build_queue` is the
pure part; :func:`unlabelled` reads what it needs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import select

from ..models import failure_signatures_table as sig_t
from ..models import run_summaries_table as runs_t
from ..projections.queries import refresh
from ..store import EventStore
from ._read import labels_for

Grouping = Literal["signature", "mode"]
UNASSIGNED = "unassigned"
"""The group of failed runs the mode assignment given does not place."""


@dataclass(frozen=True, slots=True)
class QueueItem:
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


@dataclass(frozen=True, slots=True)
class QueueGroup:
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


def build_queue(
    items: Iterable[QueueItem],
    *,
    grouping: Grouping,
    labelled_runs: Collection[str] = (),
    labelled_signatures: Collection[str] = (),
    labelled_modes: Collection[str] = (),
) -> list[QueueGroup]:
    """The queue of ``items`` not labelled themselves nor through their signature or mode."""
    groups: dict[str, list[QueueItem]] = {}
    key_of: Callable[[QueueItem], str] = (
        (lambda item: item.signature)
        if grouping == "signature"
        else (lambda item: item.mode or UNASSIGNED)
    )
    for item in items:
        if (
            item.run_id in labelled_runs
            or item.signature in labelled_signatures
            or (item.mode is not None and item.mode in labelled_modes)
        ):
            continue
        groups.setdefault(key_of(item), []).append(item)
    queue = [
        QueueGroup(grouping, key, tuple(sorted(runs, key=lambda i: (i.failed_at, i.run_id))))
        for key, runs in groups.items()
    ]
    queue.sort(key=lambda g: (-len(g.items), g.oldest, g.key))
    return queue


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _failed_runs(store: EventStore, modes: Mapping[str, str] | None) -> list[QueueItem]:
    c = runs_t.c
    query = select(
        c.run_id, c.signature, c.scenario, c.model_version, c.failed_step, c.error_type,
        c.failure_message, c.started_at, c.ended_at,
    ).where(
        c.signature.is_not(None),
        c.replay_of.is_(None),
        c.forked_from.is_(None),
        c.rerun_of.is_(None),
    )  # fmt: skip
    with store.engine.connect() as conn:
        rows = conn.execute(query).all()
    return [
        QueueItem(
            run_id=row.run_id,
            signature=row.signature,
            mode=None if modes is None else modes.get(row.run_id),
            scenario=row.scenario,
            model_version=row.model_version,
            failed_step=row.failed_step,
            error_type=row.error_type,
            message=row.failure_message,
            failed_at=_utc(row.ended_at or row.started_at),
        )
        for row in rows
    ]


def _labelled_in_library(store: EventStore) -> tuple[set[str], set[str]]:
    """Runs and signatures with a current label, from the library's signature rows."""
    runs: set[str] = set()
    signatures: set[str] = set()
    with store.engine.connect() as conn:
        rows = conn.execute(select(sig_t.c.signature, sig_t.c.labels)).all()
    for signature, raw in rows:
        labels = json.loads(raw) if isinstance(raw, str | bytes) else raw or []
        for item in labels:
            if item.get("run_id"):
                runs.add(item["run_id"])
            else:
                signatures.add(signature)
    return runs, signatures


def unlabelled(
    store: EventStore, *, by: Grouping = "signature", modes: Mapping[str, str] | None = None
) -> list[QueueGroup]:
    """The queue of unlabelled failed runs grouped ``by`` signature or mode. ``modes`` maps run
    ids to mode ids (``steplog.modes.modes_of(store).assignment``); grouping by mode needs it,
    and with it a label on a mode takes its runs out of the queue."""
    if by == "mode" and modes is None:
        raise ValueError("grouping by mode needs the runs' modes")
    refresh(store)
    runs, signatures = _labelled_in_library(store)
    labelled_modes: set[str] = set()
    if modes is not None:
        found = labels_for(store, "mode", sorted(set(modes.values())))
        labelled_modes = {
            mode for mode, notes in found.items() if any(a.kind == "label" for a in notes)
        }
    return build_queue(
        _failed_runs(store, modes),
        grouping=by,
        labelled_runs=runs,
        labelled_signatures=signatures,
        labelled_modes=labelled_modes,
    )
