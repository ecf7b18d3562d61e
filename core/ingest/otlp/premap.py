"""A round's traces mapped before its transaction, and its events prepared for the store as one
batch (:func:`premap`), so the write lock is held only for the writes.

Every trace is mapped alone (a trace that fails is left to the transaction, which quarantines it
with its reason). Their events are then validated and serialized in one
:meth:`~steplog.store.EventStore._prepare_batch` call for the whole round: the same columns as
one call per trace, without the per-call work repeated for each. Only when that batch is refused
(an event too large, a NUL character) is each trace prepared alone, as before, and a refused
trace left to the transaction too. The transaction queues the rows of the traces it stores
(:meth:`RoundMap.queue`), in its own order, each run from its first event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ...store import EventStore, PreparedBatch, RoundRows
from . import archive
from .genai import MappedRun, map_trace
from .span_model import Span


@dataclass(slots=True)
class Premapped:
    """One trace mapped before the transaction: its run, where its events are in the round's
    batch (``start`` to ``stop``), and its spans packed for the archive."""

    run: MappedRun
    start: int
    stop: int
    packed: bytes

    @property
    def count(self) -> int:
        """How many events its run has."""
        return self.stop - self.start


@dataclass(slots=True)
class RoundMap:
    """The traces of a round that mapped and prepared, by trace id, and their events' batch."""

    traces: dict[str, Premapped]
    batch: PreparedBatch
    now: datetime
    """The time of an event that has none (as :meth:`RoundRows.add` takes it)."""

    def queue(self, into: RoundRows, ready: list[Premapped]) -> None:
        """Queue the events of the ``ready`` traces into ``into``, in that order, each run from
        seq 0: one :meth:`RoundRows.add_runs` per stretch of them that lies in one piece in
        the batch (the whole round, when every trace is stored in the order it was mapped)."""
        batch = self.batch
        start = 0
        while start < len(ready):
            stop = start + 1
            while stop < len(ready) and ready[stop].start == ready[stop - 1].stop:
                stop += 1
            first, last = ready[start].start, ready[stop - 1].stop
            part = batch if (first, last) == (0, len(batch)) else batch.part(first, last)
            runs = [(trace.run.run_id, trace.count) for trace in ready[start:stop]]
            into.add_runs(runs, part, self.now)
            start = stop


def premap(
    store: EventStore,
    loaded: dict[str, list[Span]],
    bodies: dict[str, list[str]] | None,
    now: datetime,
) -> RoundMap:
    """Map and prepare the traces of ``loaded`` (see the module docstring); ``bodies``: their
    staged bodies, which the archive packs as they are, when the reader kept them."""
    mapped: dict[str, MappedRun] = {}
    for trace_id, spans in loaded.items():
        if not spans:
            continue
        try:
            mapped[trace_id] = map_trace(spans)
        except Exception:  # decided (and quarantined) inside the transaction
            continue
    try:
        batch = store._prepare_batch([event for run in mapped.values() for event in run.events])
    except Exception:  # one trace's event refused: each trace alone, as the transaction will
        batch, mapped = _each_alone(store, mapped)
    traces: dict[str, Premapped] = {}
    start = 0
    for trace_id, run in mapped.items():
        stop = start + len(run.events)
        read = bodies.get(trace_id) if bodies is not None else None
        packed = archive.pack_bodies(read) if read else archive.pack(loaded[trace_id])
        traces[trace_id] = Premapped(run, start, stop, packed)
        start = stop
    return RoundMap(traces, batch, now)


def _each_alone(
    store: EventStore, mapped: dict[str, MappedRun]
) -> tuple[PreparedBatch, dict[str, MappedRun]]:
    """The batch of the traces whose events prepare alone, and those traces."""
    kept: dict[str, MappedRun] = {}
    parts: list[PreparedBatch] = []
    for trace_id, run in mapped.items():
        try:
            parts.append(store._prepare_batch(run.events))
        except Exception:
            continue
        kept[trace_id] = run
    joined = PreparedBatch([], [], [], [], [])
    for part in parts:
        joined.ids.extend(part.ids)
        joined.hexes.extend(part.hexes)
        joined.kinds.extend(part.kinds)
        joined.payloads.extend(part.payloads)
        joined.times.extend(part.times)
    return joined, kept


__all__ = ["Premapped", "RoundMap", "premap"]
