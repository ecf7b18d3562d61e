"""Modes of a store, computed on demand and cached per log position.

Modes are a projection of the log, but not a stored one: a rebuild is one read of the failed
runs' events and one clustering of their distinct feature documents (seconds at 100,000 runs),
deterministic, so there is nothing to migrate or keep in step. The result is cached in the
process, keyed by the store, the log's last position and the options: a second call on an
unchanged log (a UI page rerun, ``compare --by-mode`` after ``modes``) costs one query. When
the log grew by few runs since the cached build, only the runs with events past the cached
position are read again, and the new ones are assigned to the nearest
existing mode (:meth:`ModeSet.assign`) instead of reclustering, and the modes they joined have
their size, counts, steps, signatures and exemplars recomputed as a rebuild computes them
(:func:`refreshed`); past ``REBUILD_SHARE`` new runs, or on ``rebuild=True``, the modes are
rebuilt.
"""

from __future__ import annotations

from dataclasses import replace
from threading import Lock

from sqlalchemy import select

from ..models import events_table as events_t
from ..projections.queries import refresh
from ..store import EventStore
from ._cluster import ModeSet, build_modes, refreshed
from ._features import RunFeatures, load_features

REBUILD_SHARE = 0.05
_cache: dict[tuple[str, bool], tuple[int, list[RunFeatures], ModeSet]] = {}
_lock = Lock()


def modes_of(
    store: EventStore, *, include_completed: bool = False, rebuild: bool = False
) -> ModeSet:
    """The failure modes of ``store``'s failed runs (``include_completed``: every finished
    run), from the cache when the log has not changed."""
    return modes_and_runs(store, include_completed=include_completed, rebuild=rebuild)[0]


def modes_and_runs(
    store: EventStore, *, include_completed: bool = False, rebuild: bool = False
) -> tuple[ModeSet, list[RunFeatures]]:
    """:func:`modes_of`, and the runs' features it was built from (and assigned)."""
    refresh(store)
    key = (store.url, include_completed)
    position = store.last_position()
    with _lock:
        cached = _cache.get(key)
    if cached is not None and cached[0] == position and not rebuild:
        return cached[2], cached[1]
    if cached is not None and not rebuild:
        runs = _read_since(store, cached[0], cached[1], include_completed)
        modes = _updated(cached[1], cached[2], runs)
    else:
        runs = load_features(store, include_completed=include_completed)
        modes = build_modes(runs)
    with _lock:
        _cache[key] = (position, runs, modes)
    return modes, runs


def _read_since(
    store: EventStore, position: int, runs: list[RunFeatures], include_completed: bool
) -> list[RunFeatures]:
    """``runs`` (read at log ``position``) brought up to date by reading only the runs with an
    event past ``position``: the cost of an update follows the new runs, not the store."""
    query = select(events_t.c.run_id).where(events_t.c.position > position).distinct()
    with store.engine.connect() as conn:
        touched = {row[0] for row in conn.execute(query)}
    if len(touched) > REBUILD_SHARE * max(len(runs), 1):  # a rebuild follows: read everything
        return load_features(store, include_completed=include_completed)
    fresh = load_features(store, include_completed=include_completed, run_ids=sorted(touched))
    kept = [run for run in runs if run.run_id not in touched]
    return sorted([*kept, *fresh], key=lambda run: run.run_id)


def _updated(old_runs: list[RunFeatures], modes: ModeSet, runs: list[RunFeatures]) -> ModeSet:
    """``modes`` with the runs that are new since it was built assigned to their nearest mode,
    and the modes they joined refreshed (size, counts, steps, signatures, exemplars: as a
    rebuild computes them over the same membership); rebuilt when many runs are new, a run
    changed, or a new run fits no mode."""
    before = {run.run_id: run.document for run in old_runs}
    new = [run for run in runs if run.run_id not in before]
    changed = len(before) != len(runs) - len(new) or any(
        before.get(run.run_id, run.document) != run.document for run in runs
    )
    if changed or len(new) > REBUILD_SHARE * max(len(runs), 1):
        return build_modes(runs)
    assigned = modes.assign(new)
    if any(mode is None for mode in assigned.values()):
        return build_modes(runs)
    grown = replace(modes, assignment={**modes.assignment, **assigned})  # type: ignore[dict-item]
    return refreshed(grown, runs, {str(mode) for mode in assigned.values()})


def clear_cache() -> None:
    """Forget every cached build (tests; a store replaced under the same URL)."""
    with _lock:
        _cache.clear()
