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
from operator import attrgetter, itemgetter
from typing import Any

from pydantic import ValidationError
from pydantic_core import from_json
from sqlalchemy import Connection, select

from ...events import describe_validation_error
from ...models import events_table
from ...store import (
    SQLITE_INSERT,
    EventStore,
    NewEvent,
    PreparedBatch,
    RoundRows,
    StoredEvent,
    copy_rows,
    gc_paused,
    prefer_index_scans,
    quarantine_in,
    with_retries,
    write_transaction,
)
from ..ids import stable_event_id
from ..report import ImportReport, Rejected, Rejection
from . import archive
from .genai import MappedRun, map_trace, run_id_for
from .premap import Premapped, RoundMap, premap
from .revise import revision_batch
from .span_model import Span
from .tree import has_one_root

_CHUNK = 400
_span_id_of = attrgetter("span_id")
_span_id_of_row = itemgetter(1)
_COPY_EVENTS = (
    "COPY events (position, event_id, run_id, seq, type, schema_version, recorded_at, payload) "
    "FROM STDIN (FORMAT BINARY)"
)
_COPY_TYPES = ["int8", "bytea", "varchar", "int4", "varchar", "int4", "timestamptz", "bytea"]
"""Binary COPY: the server receives uuids, integers and times as they are stored instead of
parsing their text. Binary COPY carries no types, so :class:`RoundRows` holds the event id
and the payload in their columns' binary forms already, sent as they are by the driver's
``bytea`` dumper: the uuid's 16 bytes (read by the server as the column's uuid) and jsonb's
version byte before the JSON text (read as the column's jsonb)."""


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


def assemble_round(
    ctx: RoundContext,
    loaded: dict[str, list[Span]],
    bodies: dict[str, list[str]] | None = None,
) -> Outcome:
    """Claim and store the traces of ``loaded`` (trace id -> the staged spans read for it;
    ``bodies``: their staged bodies, in the same order, when the reader kept them).

    Every trace read is mapped before the transaction; one that turns out to be a run already
    (late spans: rare) is handled inside it, from its archive, and its premapping dropped.

    The round runs with the cyclic garbage collector paused (:func:`~steplog.store.gc_paused`):
    it allocates a few dozen objects per span that all live until the round ends, so every
    young collection during it walked them for nothing -- a round makes no garbage cycles
    (reference counting frees it all when it ends)."""
    with gc_paused():
        return _assemble_round(ctx, loaded, bodies)


def _assemble_round(
    ctx: RoundContext, loaded: dict[str, list[Span]], bodies: dict[str, list[str]] | None
) -> Outcome:
    store = ctx.store
    premapped = premap(store, loaded, bodies, ctx.clock())

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
        self.rows = RoundRows(self.store._sqlite)
        """The events the round appends, inserted by :meth:`_flush`."""

    def run(self, loaded: dict[str, list[Span]], premapped: RoundMap) -> None:
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
        ready_now: list[Premapped] = []  # queued together, before any other trace's events
        for trace_id, spans in claimed.items():
            ready = premapped.traces.get(trace_id)
            if (
                ready is not None
                and len(spans) == len(loaded[trace_id])  # the spans read: no straggler came
                and trace_id not in archived
                and ready.run.run_id not in existing
            ):
                ready_now.append(ready)
                if not ready.run.phantom:  # a phantom trace is archived, not a run
                    self.report.stored(ready.run.run_id, ready.count, duplicate=False)
                fresh.append((trace_id, ready.run.run_id, spans))
                packed[trace_id] = ready.packed
                continue
            premapped.queue(self.rows, ready_now)  # the events stay in the claim's order
            ready_now = []
            if trace_id in archived:
                self._late(archived[trace_id], spans)
            else:
                kept = self._new_run(trace_id, spans, exists=run_id_for(trace_id) in existing)
                if kept is not None:
                    fresh.append(kept)
        premapped.queue(self.rows, ready_now)
        self._flush(store._last_position(conn) + 1)
        archive.save_in(conn, fresh, self.now, existing=set(), packed=packed)

    # --- claiming ------------------------------------------------------------------------------

    def _claim(self, traces: list[str], loaded: dict[str, list[Span]]) -> dict[str, list[Span]]:
        """Delete the staged spans of ``traces``; return them by trace (read spans reused, spans
        staged since the read decoded), in the order the deletion returned the traces.

        The rows come straight from the driver (no SQLAlchemy row each). A trace whose rows
        are exactly the spans read -- every round's case -- is its read list as it is; only
        one that changed since the read is rebuilt span by span: the spans read in the order
        they were read in, new ones last."""
        store, conn = self.store, self.conn
        mark = "?" if store._sqlite else "%s"
        returned: dict[str, list[Any]] = {}
        for start in range(0, len(traces), _CHUNK):
            part = traces[start : start + _CHUNK]
            sql = (
                f"DELETE FROM otlp_spans WHERE trace_id IN ({', '.join([mark] * len(part))}) "
                "RETURNING trace_id, span_id, body"
            )
            for row in store._fetch(conn, sql, part):
                rows = returned.get(row[0])
                if rows is None:
                    returned[row[0]] = [row]
                else:
                    rows.append(row)
        claimed: dict[str, list[Span]] = {}
        for trace_id, rows in returned.items():
            read = loaded.get(trace_id, [])
            if len(rows) == len(read) and set(map(_span_id_of_row, rows)) == set(
                map(_span_id_of, read)
            ):  # span ids are unique within a trace (the staging table's key)
                claimed[trace_id] = list(read)
                continue
            known = {s.span_id: s for s in read}
            spans = []
            for _, span_id, body in rows:
                span = known.get(span_id)
                spans.append(Span.from_compact(from_json(body)) if span is None else span)
            order = {s.span_id: i for i, s in enumerate(read)}
            spans.sort(key=lambda s: order.get(s.span_id, len(order)))
            claimed[trace_id] = spans
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

    def _append(self, run_id: str, seq: int, batch: PreparedBatch) -> None:
        """Queue ``batch`` for run ``run_id`` from ``seq`` on (every queued event is inserted by
        :meth:`_flush`, in one statement, at the next positions)."""
        self.rows.add(run_id, seq, batch, self.now)

    def _flush(self, position: int) -> None:
        """Insert the queued events from ``position`` on (under the position lock): one
        driver-level ``executemany`` for the whole round, in the form
        :meth:`EventStore._insert` uses, or one ``COPY``; each row zipped from the round's
        columns as it is sent."""
        if not self.rows:
            return
        rows = self.rows.rows(position)
        if self.store._sqlite:
            self.conn.exec_driver_sql(SQLITE_INSERT, list(rows))
        else:  # COPY: psycopg's executemany sends a statement per row
            copy_rows(self.conn, _COPY_EVENTS, _COPY_TYPES, rows)
        self.rows = RoundRows(self.store._sqlite)

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
        except Exception as exc:  # a payload the catalogue refuses, or a defect
            reason = f"cannot map the trace to a run: {_described(exc)}"  # on this trace alone
            self._quarantine_trace(trace_id, spans, reason)
            return None
        if exists:
            return self._reconcile(mapped, spans)
        try:
            batch = self.store._prepare_batch(mapped.events)
        except Exception as exc:  # the store refuses the run itself (e.g. too large)
            reason = f"the store refused the run of this trace: {_described(exc)}"
            self._quarantine_trace(trace_id, spans, reason)
            return None
        self._append(mapped.run_id, 0, batch)
        if not mapped.phantom:
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
        """Spans of a trace that is already a run (new ones, or re-sent with other content):
        revise the run within the late window, quarantine them after it (a run assembled
        without its root has no window: its spans revise it whenever they come)."""
        spans_now, changed = archive.merged(trace.spans, spans)
        run_id = trace.run_id
        if not changed:  # every span was an identical re-send: the run holds them already
            version = self.store._version(self.conn, run_id)
            if version:  # (a phantom trace has no run)
                self.report.stored(run_id, version, duplicate=True)
            return
        known = {s.span_id for s in trace.spans}
        resent = sum(1 for s in changed if s.span_id in known)
        age = (self.now - _utc(trace.assembled_at)).total_seconds()
        window = self.ctx.late_window.total_seconds()
        if age > window and has_one_root(trace.spans):  # a run without its root has no
            # window: it was assembled as it stood after a pause and waits for its root
            for span in changed:
                what = "was re-sent with other content" if span.span_id in known else "arrived"
                reason = (
                    f"span {span.name!r} {what} {age:.0f} s after trace {span.trace_id} became "
                    f"run {run_id}: later than the {window:.0f} s in which late spans revise a run"
                )
                where = f"trace {span.trace_id} span {span.span_id}"
                self._reject(Rejected(where, reason, json.dumps(span.to_json())))
            return
        stored = self._read_run(run_id)
        parts = [f"{len(changed) - resent} late span(s) arrived"] if len(changed) > resent else []
        parts += [f"{resent} span(s) re-sent with other content"] if resent else []
        try:  # pure work on data: whatever it raises, these spans fail alone
            mapped = map_trace(spans_now)
            if mapped.phantom:  # still no run (one stored before phantoms were known stays)
                batch: list[NewEvent] = []
            elif not stored:  # a phantom trace that late spans made a run
                batch = list(mapped.events)
            else:
                batch, _ = revision_batch(stored, run_id, mapped.events, "; ".join(parts))
            prepared = self.store._prepare_batch(batch) if batch else None
        except Exception as exc:  # a defect on one trace must not stop the round
            reason = f"cannot map the trace with its late spans to a run: {_described(exc)}"
            self._quarantine_trace(trace.trace_id, changed, reason)
            return
        if prepared:
            self._append(run_id, len(stored), prepared)
        archive.save_in(
            self.conn, [(trace.trace_id, run_id, spans_now)], self.now, existing={trace.trace_id}
        )
        if stored or batch:
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


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _described(exc: Exception) -> str:
    """An exception as a quarantine reason: its message, named by its class unless it is a
    plain refusal (a ``ValueError`` or ``TypeError`` says what was wrong on its own)."""
    if isinstance(exc, ValidationError):  # an event the catalogue refuses: which field, why
        return describe_validation_error(exc.title, exc)
    if isinstance(exc, ValueError | TypeError) and str(exc):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def merge(into: ImportReport, part: ImportReport) -> None:
    """Add ``part``'s counts to ``into``."""
    into.appended += part.appended
    into.already_stored += part.already_stored
    into.run_ids |= part.run_ids
    into.quarantined.extend(part.quarantined)


__all__ = ["NewEvent", "Outcome", "RoundContext", "assemble_round", "merge"]
