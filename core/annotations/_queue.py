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
from datetime import UTC, datetime

from sqlalchemy import select

from ..models import failure_signatures_table as sig_t
from ..models import run_summaries_table as runs_t
from ..projections.queries import refresh
from ..store import EventStore
from ._models import Grouping, QueueGroup, QueueItem
from ._read import labels_for

UNASSIGNED = "unassigned"
"""The group of failed runs the mode assignment given does not place."""


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
        QueueGroup(
            grouping=grouping,
            key=key,
            items=tuple(sorted(runs, key=lambda i: (i.failed_at, i.run_id))),
        )
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
    return [  # the columns have the fields' types: no validator per failed run
        QueueItem.model_construct(
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
            mode for mode, notes in found.by_target.items() if any(a.kind == "label" for a in notes)
        }
    return build_queue(
        _failed_runs(store, modes),
        grouping=by,
        labelled_runs=runs,
        labelled_signatures=signatures,
        labelled_modes=labelled_modes,
    )
