"""One assembly round: claim staged traces and store their runs, all in one transaction.

The expensive work -- reading the staged spans, mapping each trace to a run, serialising its
events into driver rows, compressing its spans for the archive -- happens before the
transaction, so the write lock is held only for the writes. The transaction then

1. **claims** the round's traces: it deletes their staged spans, returning what it deleted.
   A trace whose spans another assembler deleted first is simply not this round's any more (it
   returns nothing: its rows stay locked by the other transaction until it ends); spans that
   arrived after the read come back with it and are mapped too;
2. takes the store's position lock (PostgreSQL; SQLite's write lock is already held) before it
   reads a run, so no other writer appends between its reads of the event log and its writes,
   and positions are assigned in commit order. The claim need not hold it: the deleted rows
   are this transaction's alone (two assemblers claiming overlapping traces in opposite
   orders deadlock, and PostgreSQL aborts one of them, which retries);
3. appends the new runs in one batch, archives their spans (compressed, for late spans and
   ``steplog reassemble``), revises runs whose traces got late spans, and quarantines what
   cannot be stored -- all on the same connection.

So a trace is assembled by exactly one assembler, once; a crash anywhere rolls the round back
and leaves every span staged; nothing acknowledged is lost and no span is taken for "late"
because another assembler was working on the same trace.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_core import from_json
from sqlalchemy import Connection, select

from ...errors import InvalidEventError
from ...models import events_table
from ...store import (
    SQLITE_INSERT,
    EventStore,
    NewEvent,
    Prepared,
    StoredEvent,
    copy_rows,
    prefer_index_scans,
    quarantine_in,
    sqlite_datetime,
    sqlite_rows,
    utc,
    with_retries,
    write_transaction,
)
from ..ids import stable_event_id
from ..report import ImportReport, Rejected, Rejection
from . import archive
from .genai import MappedRun, map_trace, run_id_for
from .revise import revision_batch
from .spans import Span

_CHUNK = 400
_COPY_EVENTS = (
    "COPY events (position, event_id, run_id, seq, type, schema_version, recorded_at, payload) "
    "FROM STDIN (FORMAT BINARY)"
)
_COPY_TYPES = ["int8", "uuid", "varchar", "int4", "varchar", "int4", "timestamptz", "jsonb"]
"""Binary COPY: the server receives uuids, integers and times as they are stored instead of
parsing their text (the payload is still JSON text, behind jsonb's version byte: the payloads
are serialized JSON already, ``Prepared.payload_json``, and sent as they are)."""


@dataclass(slots=True)
class _Premapped:
    """A trace mapped before the transaction: its run, its events' driver rows without their
    positions (see :func:`_row_tails`), and its spans packed for the archive."""

    run: MappedRun
    batch: list[Prepared]
    tails: list[tuple[Any, ...]]
    packed: bytes


@dataclass(slots=True)
class Outcome:
    """What one round did: its report, and the traces it found claimed by someone else."""

    report: ImportReport = field(default_factory=ImportReport)
    taken_elsewhere: list[str] = field(default_factory=list)


@dataclass(slots=True)
class RoundContext:
    """What a round needs from the pipeline."""

    store: EventStore
    source: str
    late_window: timedelta
    clock: Callable[[], datetime]


def assemble_round(ctx: RoundContext, loaded: dict[str, list[Span]]) -> Outcome:
    """Claim and store the traces of ``loaded`` (trace id -> the staged spans read for it)."""
    store = ctx.store
    archived_before = archive.load(store, [t for t, spans in loaded.items() if spans])
    premapped: dict[str, _Premapped] = {}
    now = ctx.clock()
    for trace_id, spans in loaded.items():
        if not spans or trace_id in archived_before:
            continue
        try:
            run = map_trace(spans)
            batch = store._prepare(run.events)
        except (ValueError, TypeError, InvalidEventError):
            continue  # decided (and quarantined) inside the transaction
        tails = _row_tails(store._sqlite, run.run_id, 0, batch, now)
        premapped[trace_id] = _Premapped(run, batch, tails, archive.pack(spans))

    def attempt() -> Outcome:
        outcome = Outcome()
        with write_transaction(store.engine) as conn:
            prefer_index_scans(conn)
            _Writer(ctx, conn, outcome).run(loaded, premapped)
        return outcome

    return with_retries(store.engine, attempt)  # a retried round claims afresh


class _Writer:
    """The transaction of one round."""

    def __init__(self, ctx: RoundContext, conn: Connection, outcome: Outcome) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.conn = conn
        self.outcome = outcome
        self.report = outcome.report
        self.now = ctx.clock()
        self.tails: list[tuple[Any, ...]] = []

    def run(self, loaded: dict[str, list[Span]], premapped: dict[str, _Premapped]) -> None:
        store, conn = self.store, self.conn
        wanted = [trace_id for trace_id, spans in loaded.items() if spans]
        claimed = self._claim(wanted, loaded)
        self.outcome.taken_elsewhere = [t for t in wanted if t not in claimed]
        if not claimed:
            return
        archived = archive.load_in(conn, list(claimed))
        store._lock_positions(conn)  # before the first read of the event log
        existing = self._existing_runs([run_id_for(t) for t in claimed])
        fresh: list[tuple[str, str, list[Span]]] = []
        packed: dict[str, bytes] = {}
        for trace_id, spans in claimed.items():
            ready = premapped.get(trace_id)
            if (
                ready is not None
                and len(spans) == len(loaded[trace_id])  # the spans read: no straggler came
                and trace_id not in archived
                and ready.run.run_id not in existing
            ):
                self.tails.extend(ready.tails)
                self.report.stored(ready.run.run_id, len(ready.batch), duplicate=False)
                fresh.append((trace_id, ready.run.run_id, spans))
                packed[trace_id] = ready.packed
            elif trace_id in archived:
                self._late(archived[trace_id], spans)
            else:
                kept = self._new_run(trace_id, spans, exists=run_id_for(trace_id) in existing)
                if kept is not None:
                    fresh.append(kept)
        self._flush(store._last_position(conn) + 1)
        archive.save_in(conn, fresh, self.now, existing=set(), packed=packed)

    # --- claiming ------------------------------------------------------------------------------

    def _claim(self, traces: list[str], loaded: dict[str, list[Span]]) -> dict[str, list[Span]]:
        """Delete the staged spans of ``traces``; return them by trace (read spans reused, spans
        staged since the read decoded)."""
        mark = "?" if self.store._sqlite else "%s"
        known = {(s.trace_id, s.span_id): s for spans in loaded.values() for s in spans}
        claimed: dict[str, list[Span]] = {}
        for start in range(0, len(traces), _CHUNK):
            part = traces[start : start + _CHUNK]
            rows = self.conn.exec_driver_sql(
                f"DELETE FROM otlp_spans WHERE trace_id IN ({', '.join([mark] * len(part))}) "
                "RETURNING trace_id, span_id, body",
                tuple(part),
            ).all()
            for trace_id, span_id, body in rows:
                span = known.get((trace_id, span_id))
                if span is None:
                    span = Span.from_compact(from_json(body))
                claimed.setdefault(trace_id, []).append(span)
        for trace_id, spans in claimed.items():  # the order they were read in, new ones last
            order = {s.span_id: i for i, s in enumerate(loaded.get(trace_id, ()))}
            spans.sort(key=lambda s: order.get(s.span_id, len(order)))
        return claimed

    def _existing_runs(self, run_ids: list[str]) -> set[str]:
        e = events_table.c
        found: set[str] = set()
        for start in range(0, len(run_ids), _CHUNK):
            part = run_ids[start : start + _CHUNK]
            query = select(e.run_id).where(e.run_id.in_(part), e.seq == 0)
            found.update(row[0] for row in self.conn.execute(query))
        return found

    # --- writing -------------------------------------------------------------------------------

    def _append(self, run_id: str, seq: int, batch: list[Prepared]) -> None:
        """Queue ``batch`` for run ``run_id`` from ``seq`` on (every queued event is inserted by
        :meth:`_flush`, in one statement, at the next positions)."""
        self.tails.extend(_row_tails(self.store._sqlite, run_id, seq, batch, self.now))

    def _flush(self, position: int) -> None:
        """Insert the queued events from ``position`` on (under the position lock): one
        driver-level ``executemany`` for the whole round, in the form
        :meth:`EventStore._insert` uses."""
        if not self.tails:
            return
        rows = [(position + i, *tail) for i, tail in enumerate(self.tails)]
        if self.store._sqlite:
            self.conn.exec_driver_sql(SQLITE_INSERT, rows)
        else:  # COPY: psycopg's executemany sends a statement per row
            copy_rows(self.conn, _COPY_EVENTS, _COPY_TYPES, rows)
        self.tails = []

    def _read_run(self, run_id: str) -> list[StoredEvent]:
        store = self.store
        mark = "?" if store._sqlite else "%s"
        rows = store._fetch(
            self.conn,
            "SELECT position, event_id, run_id, seq, type, schema_version, recorded_at, payload "
            f"FROM events WHERE run_id = {mark} ORDER BY seq",
            (run_id,),
        )
        return [store._to_stored(row) for row in rows]

    def _new_run(
        self, trace_id: str, spans: list[Span], *, exists: bool
    ) -> tuple[str, str, list[Span]] | None:
        """A trace that was not mapped before the transaction (spans came meanwhile, the map
        failed, or its run exists): store it now; what to archive, if anything."""
        try:
            mapped = map_trace(spans)
        except (ValueError, TypeError) as exc:  # a payload the catalogue refuses
            self._quarantine_trace(trace_id, spans, f"cannot map the trace to a run: {exc}")
            return None
        if exists:
            return self._reconcile(mapped, spans)
        try:
            batch = self.store._prepare(mapped.events)
        except InvalidEventError as exc:  # the store refuses the run itself (e.g. too large)
            reason = f"the store refused the run of this trace: {exc}"
            self._quarantine_trace(trace_id, spans, reason)
            return None
        self._append(mapped.run_id, 0, batch)
        self.report.stored(mapped.run_id, len(batch), duplicate=False)
        return (trace_id, mapped.run_id, spans)

    def _reconcile(
        self, mapped: MappedRun, spans: list[Span]
    ) -> tuple[str, str, list[Span]] | None:
        """The run exists without an archived trace (stored before spans were kept): the same
        events are a re-send; otherwise keep the spans it holds and quarantine the rest."""
        stored_ids = {event.event_id for event in self._read_run(mapped.run_id)}
        known = [e for e in mapped.events if e.event_id in stored_ids]
        self.report.stored(mapped.run_id, len(known), duplicate=True)
        if len(known) == len(mapped.events):
            return (mapped.trace_id, mapped.run_id, spans)
        held = _span_ids_of(mapped, stored_ids, spans)
        for span in spans:
            if span.span_id in held:
                continue
            self._reject(
                Rejected(
                    location=f"trace {span.trace_id} span {span.span_id}",
                    reason=(
                        f"span {span.name!r} arrived after trace {span.trace_id} was stored as run "
                        f"{mapped.run_id}, and would change it; runs are immutable"
                    ),
                    raw=json.dumps(span.to_json()),
                )
            )
        return None

    def _late(self, trace: archive.ArchivedTrace, spans: list[Span]) -> None:
        """Spans of a trace that is already a run: revise the run within the late window,
        quarantine them after it."""
        spans_now = archive.merged(trace.spans, spans)
        late = spans_now[len(trace.spans) :]
        run_id = trace.run_id
        if not late:  # every span was a re-send: the run holds them already
            self.report.stored(run_id, self.store._version(self.conn, run_id), duplicate=True)
            return
        assembled_at = trace.assembled_at
        if assembled_at.tzinfo is None:
            assembled_at = assembled_at.replace(tzinfo=UTC)
        age = (self.now - assembled_at).total_seconds()
        window = self.ctx.late_window.total_seconds()
        if age > window:
            for span in late:
                reason = (
                    f"span {span.name!r} arrived {age:.0f} s after trace {span.trace_id} became "
                    f"run {run_id}: later than the {window:.0f} s in which late spans revise a run"
                )
                where = f"trace {span.trace_id} span {span.span_id}"
                self._reject(Rejected(where, reason, json.dumps(span.to_json())))
            return
        try:
            mapped = map_trace(spans_now)
        except (ValueError, TypeError) as exc:
            reason = f"cannot map the trace with its late spans to a run: {exc}"
            self._quarantine_trace(trace.trace_id, late, reason)
            return
        stored = self._read_run(run_id)
        reason = f"{len(late)} late span(s) arrived"
        batch, _ = revision_batch(stored, run_id, mapped.events, reason)
        if batch:
            self._append(run_id, len(stored), self.store._prepare(batch))
        archive.save_in(
            self.conn, [(trace.trace_id, run_id, spans_now)], self.now, existing={trace.trace_id}
        )
        self.report.stored(run_id, len(batch), duplicate=not batch)

    # --- quarantine ------------------------------------------------------------------------------

    def _quarantine_trace(self, trace_id: str, spans: list[Span], reason: str) -> None:
        """One record for the whole trace (one OTLP/JSON request), so a retry sees it whole."""
        request: dict[str, Any] = {"resourceSpans": []}
        for span in spans:
            request["resourceSpans"].extend(span.to_json()["resourceSpans"])
        where = f"trace {trace_id} ({len(spans)} spans)"
        self._reject(Rejected(where, reason, json.dumps(request)))

    def _reject(self, bad: Rejection) -> None:
        """Quarantine ``bad`` in this transaction (as :meth:`EventStore.quarantine` does)."""
        quarantine_in(
            self.conn,
            source=self.ctx.source,
            location=bad.location,
            reason=bad.reason,
            raw=bad.raw,
        )
        self.report.quarantined.append(bad)


def _row_tails(
    sqlite: bool, run_id: str, seq: int, batch: list[Prepared], now: datetime
) -> list[tuple[Any, ...]]:
    """The driver rows of ``batch`` (run ``run_id`` from ``seq``), each without its leading
    position, which is known only under the position lock: :func:`sqlite_rows`' format on
    SQLite (``now`` where an event has no recorded time), the ``COPY`` columns on PostgreSQL."""
    if sqlite:
        return [row[1:] for row in sqlite_rows(run_id, seq, 0, batch, sqlite_datetime(now))]
    return [
        (
            item.event_id,
            run_id,
            seq + i,
            item.type,
            item.schema_version,
            now if item.recorded_at is None else utc(item.recorded_at),
            item.payload_json,
        )
        for i, item in enumerate(batch)
    ]


def _span_ids_of(mapped: MappedRun, stored_ids: set[Any], spans: list[Span]) -> set[str]:
    """Spans whose events are all in the stored run (spans that make no event count as held)."""
    held = set()
    roles = ("run-started", "step-started", "call")
    for span in spans:
        candidates = {
            stable_event_id(span.start_ns // 1_000_000, span.trace_id, span.span_id, role)
            for role in roles
        }
        makes_event = any(e.event_id in candidates for e in mapped.events)
        if not makes_event or candidates & stored_ids:
            held.add(span.span_id)
    return held


def merge(into: ImportReport, part: ImportReport) -> None:
    """Add ``part``'s counts to ``into``."""
    into.appended += part.appended
    into.already_stored += part.already_stored
    into.run_ids |= part.run_ids
    into.quarantined.extend(part.quarantined)


__all__ = ["NewEvent", "Outcome", "RoundContext", "assemble_round", "merge"]
