"""From received spans to stored runs: redact, stage durably, assemble complete traces.

Receiving and assembling are two steps because spans arrive children first, spread over many
requests, and an acknowledgement must mean *committed*:

1. :meth:`OtlpIngest.receive` redacts the spans of one request and commits them to the
   ``otlp_spans`` staging table (a re-sent span is ignored); rejected spans go to the
   quarantine. Only then does the receiver answer 200.
2. :meth:`OtlpIngest.assemble` turns every *ready* trace into one run. A trace is ready once its
   root span has been staged for ``settle_seconds`` (late siblings get a moment), or when nothing
   has arrived for it for ``idle_seconds`` (a root that has not come: assembled under a
   synthetic root, judged by what its spans say, revised if the root comes later), or at the
   end of a file import. Each round claims its traces, stores their runs with deterministic
   event ids, keeps their spans (compressed) and unstages them in one transaction
   (:mod:`.rounds`), so several assemblers can share the staged traces and each trace is
   assembled once; a trace whose assembly raises fails alone (:mod:`.isolate`).

A crash mid-round rolls the round back: its spans stay staged. Spans that arrive after their
trace became a run revise it within the late window and are quarantined after it, never silently
dropped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_core import from_json, to_json
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from ...errors import ConcurrencyError, IdempotencyError, InvalidEventError, SteplogError
from ...models import staged_spans_table
from ...store import (
    EventStore,
    connect_or_explain,
    copy_rows,
    is_sqlite,
    prefer_index_scans,
    sqlite_datetime,
    with_retries,
    write_transaction,
)
from ..redaction import Redactor
from ..report import ImportReport, Rejected
from . import archive
from .genai import find_roots, map_trace, run_id_for
from .isolate import is_infrastructure, release
from .ready import ReadyTraces
from .reclaim import StagingReclaimer
from .revise import revise
from .rounds import Outcome, RoundContext, assemble_round, merge
from .span_model import MAX_MESSAGE, MAX_NAME, DecodedRequest, RejectedSpan, RequestError, Span
from .spans import decode_document

REFUSALS = (ConcurrencyError, IdempotencyError, InvalidEventError)
_COPY_SPANS = (
    "COPY otlp_spans (trace_id, span_id, received_at, is_root, body) FROM STDIN (FORMAT BINARY)"
)
_SPAN_TYPES = ("varchar", "varchar", "timestamptz", "bool", "text")
TRACES_PER_ROUND = 200
ROUNDS_PER_LOOKUP = 5
"""An assembler looks up this many rounds' worth of ready traces at a time."""
LATE_WINDOW_SECONDS = 600.0
"""Spans arriving this long after their trace became a run still revise it (the OpenTelemetry
SDK's batch processor waits 5 s by default; a second process may flush much later)."""
REASSEMBLED = "mapped again from its stored spans"
QUIET_SECONDS = 30.0
"""A trace whose root has not come is assembled after this long without a span: an exporter
flushes every 5 s by default, so a process that crashed has sent all it will; a run still under
way that pauses longer is revised when its next spans come (a run without its root has no late
window: it waits for its root)."""


@dataclass(slots=True)
class ReassembleReport:
    """Runs revised, runs already reading as mapped, traces not archived, traces unmappable."""

    revised: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "revised": len(self.revised),
            "unchanged": len(self.unchanged),
            "missing": self.missing,
            "failed": self.failed,
            "revised_runs": self.revised,
        }


@dataclass(slots=True)
class Received:
    """The outcome of one request: spans accepted (staged) and rejected (quarantined)."""

    accepted: int = 0
    rejected: list[RejectedSpan] = field(default_factory=list)
    roots: int = 0
    trace_ids: set[str] = field(default_factory=set)

    @property
    def error_message(self) -> str:
        """A short summary of why spans were rejected, for ``partial_success``."""
        if not self.rejected:
            return ""
        first = self.rejected[0]
        more = f" (and {len(self.rejected) - 1} more)" if len(self.rejected) > 1 else ""
        return f"{first.location}: {first.reason}{more}"


class OtlpIngest:
    """Stages spans and assembles traces into runs, for the receiver and the file importer."""

    def __init__(
        self,
        store: EventStore,
        redactor: Redactor,
        *,
        source: str = "otlp:http",
        settle_seconds: float = 1.0,
        idle_seconds: float = QUIET_SECONDS,
        late_window_seconds: float | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.redactor = redactor
        self.source = source
        self.settle = timedelta(seconds=settle_seconds)
        self.idle = timedelta(seconds=idle_seconds)
        if late_window_seconds is None:
            late_window_seconds = _env_seconds("STEPLOG_LATE_SPAN_WINDOW", LATE_WINDOW_SECONDS)
        self.late_window = timedelta(seconds=late_window_seconds)
        self.clock = clock
        self._sqlite = is_sqlite(store.engine)
        mark = "?" if self._sqlite else "%s"
        self._sweep = ""  # the last trace id the assembler looked up (see :meth:`assemble`)
        self.failed_traces = 0
        """Traces released into the quarantine because assembling them raised (a defect)."""
        self._ready = ReadyTraces(store, settle=self.settle, idle=self.idle, clock=clock)
        self.reclaimer = StagingReclaimer(store)
        """Vacuums the staging table after a drained sweep (PostgreSQL; :mod:`.reclaim`)."""
        self._insert_sql = (
            "INSERT INTO otlp_spans (trace_id, span_id, received_at, is_root, body) "
            f"VALUES ({', '.join([mark] * 5)}) ON CONFLICT DO NOTHING"
        )  # driver-level: SQLAlchemy's per-row parameter processing cost more than the insert

    # --- receiving -----------------------------------------------------------------------------

    def receive(self, decoded: DecodedRequest) -> Received:
        """Redact and durably stage the usable spans; quarantine the rejected ones."""
        received = Received(rejected=list(decoded.rejected))
        now = self.clock()
        when: Any = sqlite_datetime(now) if self._sqlite else now
        rows = []
        resources: dict[int, Any] = {}  # spans of one request share their resource dict
        for span in decoded.spans:
            resource = resources.get(id(span.resource))
            if resource is None:
                resource = resources[id(span.resource)] = self.redactor.value(span.resource)
            root = not span.parent_span_id
            body = to_json(self._redacted_compact(span, resource)).decode()
            rows.append(
                (span.trace_id, span.span_id, when, int(root) if self._sqlite else root, body)
            )
        if rows:
            refused = with_retries(self.store.engine, lambda: self._stage(rows))
            if refused:  # (a retry after an ambiguous commit finds its own rows: identical)
                received.rejected.extend(refused.values())
                rows = [row for index, row in enumerate(rows) if index not in refused]
        received.accepted = len(rows)
        received.trace_ids = {row[0] for row in rows}
        received.roots = sum(1 for row in rows if row[3])
        for bad in received.rejected:
            clean = self.redacted(Rejected(bad.location, bad.reason, bad.raw))
            self.store.quarantine(
                source=self.source, location=clean.location, reason=clean.reason, raw=clean.raw
            )
        return received

    def _stage(self, rows: list[tuple[Any, ...]]) -> dict[int, RejectedSpan]:
        """Insert ``rows`` (idempotent: retried on a dropped connection); return those (by
        index) whose span was already staged, by an earlier request or an earlier row of this
        one, with other content (they were not inserted: the first version received is kept)."""
        if not self._sqlite:
            try:  # PostgreSQL: one COPY (psycopg's executemany runs a statement per span)
                with write_transaction(self.store.engine) as conn:
                    copy_rows(conn, _COPY_SPANS, _SPAN_TYPES, rows)
                return {}
            except IntegrityError:
                pass  # a span staged already (an exporter's retry): insert the others below
        with write_transaction(self.store.engine) as conn:
            inserted = conn.exec_driver_sql(self._insert_sql, rows).rowcount
            if inserted == len(rows):
                return {}  # the common case: none was staged before, nothing to compare
            return self._conflicting(conn, rows)

    def _conflicting(self, conn: Any, rows: list[tuple[Any, ...]]) -> dict[int, RejectedSpan]:
        """Rows (by index) whose span is staged with other content: a re-send that differs is
        refused (and quarantined) instead of silently losing to the first version."""
        mark = "?" if self._sqlite else "%s"
        staged: dict[tuple[str, str], str] = {}
        keys = list({(row[0], row[1]): None for row in rows})
        for start in range(0, len(keys), 400):
            part = keys[start : start + 400]
            traces = sorted({k[0] for k in part})
            spans = sorted({k[1] for k in part})
            found = conn.exec_driver_sql(
                "SELECT trace_id, span_id, body FROM otlp_spans "
                f"WHERE trace_id IN ({', '.join([mark] * len(traces))}) "
                f"AND span_id IN ({', '.join([mark] * len(spans))})",
                tuple(traces + spans),
            ).all()
            staged.update(((trace_id, span_id), body) for trace_id, span_id, body in found)
        return {
            index: RejectedSpan(
                f"trace {row[0]} span {row[1]}",
                "re-sent with the same ids and different content; the first version is kept "
                "(OTLP span ids must be unique)",
                row[4],
            )
            for index, row in enumerate(rows)
            if staged.get((row[0], row[1]), row[4]) != row[4]
        }

    def redacted(self, bad: Rejected) -> Rejected:
        """``bad`` with secrets redacted from its location, reason and raw content (structurally,
        even when it is JSON cut short: see :meth:`Redactor.document`)."""
        text = self.redactor.text
        return Rejected(text(bad.location), text(bad.reason), self.redactor.document(bad.raw))

    def _redacted_compact(self, span: Span, resource: Any) -> list[Any]:
        """``span.to_compact()`` with every string redacted: names, event names, the scope,
        attribute keys and values (JSON inside them structurally, base64 decoded), the status
        message (``resource`` already is). Ids are hex by construction: kept."""
        redact, text = self.redactor.value, self.redactor.text
        return [
            span.trace_id,
            span.span_id,
            span.parent_span_id,
            text(span.name)[:MAX_NAME],
            span.kind,
            span.start_ns,
            span.end_ns,
            redact(span.attributes),
            span.status_code,
            text(span.status_message)[:MAX_MESSAGE],
            [[text(e.name)[:MAX_NAME], e.time_ns, redact(e.attributes)] for e in span.events],
            resource,
            text(span.scope)[:MAX_NAME],
        ]

    # --- assembling ----------------------------------------------------------------------------

    def pending(self) -> tuple[int, int]:
        """How many traces and spans are staged, waiting to be assembled."""
        with connect_or_explain(self.store.engine) as conn:
            row = conn.execute(
                select(
                    func.count(func.distinct(staged_spans_table.c.trace_id)),
                    func.count(),
                )
            ).one()
        return int(row[0]), int(row[1])

    def ready_traces(
        self,
        *,
        everything: bool = False,
        limit: int = TRACES_PER_ROUND,
        shard: tuple[int, int] | None = None,
        after: str = "",
    ) -> list[str]:
        """Trace ids ready to become runs (all staged traces with ``everything``), in order, from
        the first after ``after`` on, at most ``limit``; with ``shard=(i, n)`` only those whose
        last hex digit is ``i`` modulo ``n``, so that ``n`` assemblers of one receiver do not read
        and map the same traces (their transactions claim traces anyway: see :mod:`.rounds`)."""
        return self._ready.all_after(everything=everything, limit=limit, shard=shard, after=after)

    def _next_ready(
        self, *, everything: bool, limit: int, shard: tuple[int, int] | None, after: str
    ) -> tuple[list[str], str]:
        return self._ready.next_page(everything=everything, limit=limit, shard=shard, after=after)

    def assemble(
        self, *, everything: bool = False, shard: tuple[int, int] | None = None
    ) -> ImportReport:
        """Turn ready traces (of ``shard``, see :meth:`ready_traces`) into runs until none is
        left; report what was stored. Ready traces are looked up several rounds at a time, in
        sweeps over the trace ids that carry on where the last look-up stopped (from the start
        again when none is left after it), so under a backlog every ready trace waits for at
        most one sweep, never for the traces before it that keep arriving."""
        report = ImportReport()
        whole_sweep, found = not self._sweep, False  # whether this sweep began at the start
        while True:
            traces, last = self._next_ready(
                everything=everything,
                shard=shard,
                limit=TRACES_PER_ROUND * ROUNDS_PER_LOOKUP,
                after=self._sweep,
            )
            if not last:  # the end of a sweep
                if whole_sweep and not found:
                    self.reclaimer.drained()
                    return report  # none was ready from the first staged trace to the last
                self._sweep, whole_sweep, found = "", True, False  # again from the first
                continue
            self._sweep, found = last, found or bool(traces)
            for start in range(0, len(traces), TRACES_PER_ROUND):
                outcome, loaded = self._round(traces[start : start + TRACES_PER_ROUND])
                self.reclaimer.claimed(sum(len(spans) for spans in loaded.values()))
                merge(report, outcome.report)

    def _round_context(self) -> RoundContext:
        return RoundContext(self.store, self.source, self.late_window, self.clock)

    def reassemble(self, trace_ids: Sequence[str] | None = None) -> ReassembleReport:
        """Map archived traces (all of them by default) again; revise runs that now read
        differently. Idempotent."""
        result = ReassembleReport()
        ids = list(trace_ids) if trace_ids is not None else list(archive.trace_ids(self.store))
        for start in range(0, len(ids), TRACES_PER_ROUND):
            chunk = ids[start : start + TRACES_PER_ROUND]
            found = archive.load(self.store, chunk)
            result.missing.extend(t for t in chunk if t not in found)
            for trace in found.values():
                try:
                    mapped = map_trace(trace.spans)
                except (ValueError, TypeError) as exc:
                    result.failed.append(f"trace {trace.trace_id}: {exc}")
                    continue
                if mapped.phantom:
                    continue  # not a run (one stored before phantoms were known stays)
                if self.store.version(mapped.run_id) == 0:
                    self.store.append_batch(mapped.run_id, mapped.events, expected_version=0)
                    result.revised.append(mapped.run_id)
                    continue
                done = revise(self.store, mapped.run_id, mapped.events, REASSEMBLED)
                (result.revised if done.appended else result.unchanged).append(mapped.run_id)
        return result

    def assemble_traces(self, traces: Sequence[str]) -> ImportReport:
        """Turn the named staged traces into runs now, ready or not."""
        report = ImportReport()
        for chunk in range(0, len(traces), TRACES_PER_ROUND):
            outcome, loaded = self._round(traces[chunk : chunk + TRACES_PER_ROUND])
            merge(report, outcome.report)
            gone = [t for t, spans in loaded.items() if not spans]
            for trace_id in [*gone, *outcome.taken_elsewhere]:  # assembled by a receiver
                version = self.store.version(run_id_for(trace_id))
                if version:
                    report.stored(run_id_for(trace_id), version, duplicate=True)
        return report

    def _round(self, traces: Sequence[str]) -> tuple[Outcome, dict[str, list[Span]]]:
        """Assemble ``traces`` in one round; when it raises on data, one round per trace, and a
        trace that still raises alone is released into the quarantine (:mod:`.isolate`). Also
        the spans read per trace (empty for a trace no longer staged)."""
        try:
            loaded, bodies = self._read(traces)
            return assemble_round(self._round_context(), loaded, bodies), loaded
        except Exception as exc:
            if is_infrastructure(exc):
                raise
        outcome, loaded = Outcome(), {}
        for trace_id in traces:
            try:
                alone = self._load([trace_id])
                part = assemble_round(self._round_context(), alone)
            except Exception as exc:
                if is_infrastructure(exc):
                    raise
                self.failed_traces += 1
                reason = f"the trace could not be assembled: {type(exc).__name__}: {exc}"
                bad = release(self.store, self.source, trace_id, self.redactor.text(reason))
                if bad is not None:
                    outcome.report.quarantined.append(bad)
                loaded[trace_id] = []
                continue
            loaded.update(alone)
            merge(outcome.report, part.report)
            outcome.taken_elsewhere += part.taken_elsewhere
        return outcome, loaded

    def _load(self, traces: Sequence[str]) -> dict[str, list[Span]]:
        """The staged spans of ``traces`` (an empty list for a trace no longer staged)."""
        return self._read(traces)[0]

    def _read(self, traces: Sequence[str]) -> tuple[dict[str, list[Span]], dict[str, list[str]]]:
        """:meth:`_load`, and each span's staged body as it was read (the archive packs those
        as they are instead of serializing the spans again: see :func:`.archive.pack_bodies`)."""
        mark = "?" if self._sqlite else "%s"
        marks = ", ".join([mark] * len(traces))
        sql = f"SELECT trace_id, body FROM otlp_spans WHERE trace_id IN ({marks})"

        def read() -> tuple[dict[str, list[Span]], dict[str, list[str]]]:
            grouped: dict[str, list[Span]] = {trace: [] for trace in traces}
            bodies: dict[str, list[str]] = {trace: [] for trace in traces}
            with connect_or_explain(self.store.engine) as conn:
                prefer_index_scans(conn)
                # the driver's rows: SQLAlchemy's statement building and row processing (a
                # ``Row`` each) cost more than the read
                rows = self.store._fetch(conn, sql, traces)
            decode = Span.from_compact
            for trace_id, body in rows:
                grouped[trace_id].append(decode(from_json(body)))
                bodies[trace_id].append(body)
            return grouped, bodies

        if not traces:
            return {}, {}
        return with_retries(self.store.engine, read)


def import_documents(
    ingest: OtlpIngest,
    documents: Iterable[tuple[str, Any] | Rejected],
    on_progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Stage every span of parsed OTLP/JSON ``documents`` (each with its location; unreadable
    ones arrive as :class:`Rejected` and are quarantined), then assemble every staged trace."""
    report = ImportReport()
    staged: set[str] = set()
    for item in documents:
        if isinstance(item, Rejected):
            report.reject(ingest.store, ingest.source, ingest.redacted(item))
            continue
        location, document = item
        if isinstance(document, dict) and not document.keys() & {"resourceSpans", "resource_spans"}:
            keys = ", ".join(sorted(map(str, document))[:8]) or "none"
            reason = f"not an OTLP/JSON request: no resourceSpans (its keys: {keys})"
            rejected = Rejected(location or "file", reason, _dump(document))
            report.reject(ingest.store, ingest.source, ingest.redacted(rejected))
            continue
        try:
            decoded = decode_document(document)
        except RequestError as exc:
            where = location or "file"
            rejected = Rejected(where, str(exc), _dump(document))
            report.reject(ingest.store, ingest.source, ingest.redacted(rejected))
            continue
        decoded.rejected = [
            RejectedSpan(f"{location} {bad.location}".strip(), bad.reason, bad.raw)
            for bad in decoded.rejected
        ]
        received = ingest.receive(decoded)
        report.quarantined.extend(received.rejected)  # undecodable spans, refused re-sends
        staged |= received.trace_ids
        if on_progress is not None:
            on_progress(received.accepted)
    # only this file's traces: others staged by a running receiver are waiting for their root
    assembled = ingest.assemble_traces(sorted(staged))
    report.appended += assembled.appended
    report.already_stored += assembled.already_stored
    report.run_ids |= assembled.run_ids
    report.quarantined.extend(assembled.quarantined)
    return report


def _env_seconds(name: str, default: float) -> float:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise SteplogError(f"{name}={value!r} is not a number of seconds") from None
    if not seconds >= 0:
        raise SteplogError(f"{name}={value!r} must be 0 or more seconds")
    return seconds


def _dump(document: Any) -> str:
    try:
        return json.dumps(document)[:65536]
    except (TypeError, ValueError, RecursionError):
        return repr(document)[:65536]


__all__ = ["OtlpIngest", "Received", "find_roots", "import_documents", "run_id_for"]
