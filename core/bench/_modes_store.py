"""``steplog bench modes --store``: failure modes end to end through a store of many failed runs.

Making 100,000 failed runs with the harness would take hours on this machine, so this is a
**synthetic fast path**: the failed runs of a few real harness runs are copied under new run ids
(every event re-sent with a new id, the copies spread over ``DAYS`` days) through the store's
bulk append (:meth:`EventStore.append_new_runs`, one transaction per ``BATCH`` runs), and the
read models caught up. The copies repeat the seed runs' feature documents exactly, so the
clustering here is cheap (the in-memory benchmark perturbs the documents for that); what this
measures is the rest, through the store:

* ``cold``: :func:`steplog.modes.modes_of` on the full store -- every failed run's events read
  into features, then clustered;
* ``update``: ``new`` more failed runs appended and caught up, then ``modes_of`` again -- only the
  runs with events past the cached position are read, and they are assigned to the cached modes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ..modes import clear_cache, modes_of
from ..projections.queries import refresh
from ..store import EventStore, NewEvent

BATCH = 500
DAYS = 30


@dataclass(frozen=True, slots=True)
class StoreModesBench:
    """What the through-the-store run measured."""

    runs: int
    events: int
    fill_s: float
    cold_s: float
    new: int
    update_s: float
    modes: int


def _copy(store: EventStore, seeds: list[list[NewEvent]], n: int, offset: int) -> int:
    """Append ``n`` copies of the seed runs (cycled) as new runs; the events appended."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    appended = 0
    for first in range(0, n, BATCH):
        batch = []
        for i in range(first, min(n, first + BATCH)):
            when = start + timedelta(seconds=(offset + i) * DAYS * 86_400 // max(n + offset, 1))
            events = [NewEvent(e.event, recorded_at=when) for e in seeds[i % len(seeds)]]
            batch.append((f"copy-{offset + i:08d}", events))
            appended += len(events)
        store.append_new_runs(batch)
    return appended


def run_store_benchmark(seed_url: str, folder: Path, *, runs: int, new: int) -> StoreModesBench:
    """Copy the failed runs of the store at ``seed_url`` into a new store in ``folder`` until it
    holds ``runs`` failed runs; time ``modes_of`` cold, then after ``new`` more (module doc)."""
    seed = EventStore.open(seed_url)
    try:
        failed = sorted(modes_of(seed).assignment)
        seeds = [[NewEvent(e.to_event()) for e in seed.read_run(run_id)] for run_id in failed]
    finally:
        seed.close()
    if not seeds:
        raise RuntimeError("the seeded runs had no failure to copy")
    store = EventStore.open(f"sqlite:///{folder / 'modes-store.db'}")
    try:
        started = time.perf_counter()
        events = _copy(store, seeds, runs, 0)
        refresh(store)
        fill_s = time.perf_counter() - started
        clear_cache()
        started = time.perf_counter()
        modes = modes_of(store)
        cold_s = time.perf_counter() - started
        _copy(store, seeds, new, runs)
        refresh(store)
        started = time.perf_counter()
        updated = modes_of(store)
        update_s = time.perf_counter() - started
        if len(updated.assignment) != runs + new:
            raise RuntimeError(f"{len(updated.assignment)} runs in modes, {runs + new} appended")
    finally:
        store.close()
    return StoreModesBench(
        runs=runs,
        events=events,
        fill_s=round(fill_s, 1),
        cold_s=round(cold_s, 2),
        new=new,
        update_s=round(update_s, 3),
        modes=len(modes.modes),
    )
