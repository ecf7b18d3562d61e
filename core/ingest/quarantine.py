"""Retrying quarantined input: after a fix (a new event type, an upcaster, a conflicting run
removed from the input), records are fed through the same path as the first time.

A record that now stores is marked resolved, with what became of it; one that still fails keeps
its place and gets the new reason. Records are never deleted: the quarantine is an audit trail.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update

from ..models import quarantine_table
from ..store import EventStore, QuarantinedInput, connect_or_explain, write_transaction
from .jsonl import REFUSALS, BadLine, parse_line
from .redaction import Redactor


@dataclass(frozen=True, slots=True)
class RetryOutcome:
    """What one retry did."""

    record_id: int
    resolved: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"id": self.record_id, "resolved": self.resolved, "detail": self.detail}


def retry(
    store: EventStore,
    record_ids: list[int] | None,
    *,
    source: str | None = None,
    redactor: Redactor,
) -> list[RetryOutcome]:
    """Retry the named records (or every unresolved one, of ``source`` if given)."""
    q = quarantine_table.c
    query = select(q.id, q.received_at, q.source, q.location, q.reason, q.raw, q.resolved_at)
    if record_ids is not None:
        query = query.where(q.id.in_(record_ids))
    else:
        query = query.where(q.resolved_at.is_(None))
    if source is not None:
        query = query.where(q.source == source)
    with connect_or_explain(store.engine) as conn:
        rows = {row.id: row for row in conn.execute(query.order_by(q.id))}
    outcomes = []
    for record_id in record_ids if record_ids is not None else list(rows):
        row = rows.get(record_id)
        if row is None:
            outcomes.append(RetryOutcome(record_id, False, "no such quarantined record"))
        elif row.resolved_at is not None:
            outcomes.append(RetryOutcome(record_id, True, "already resolved"))
        else:
            record = QuarantinedInput(
                row.id, row.received_at, row.source, row.location, row.reason, row.raw
            )
            outcomes.append(_retry_one(store, record, redactor))
    return outcomes


def _retry_one(store: EventStore, record: QuarantinedInput, redactor: Redactor) -> RetryOutcome:
    kind = record.source.split(":", 1)[0]
    if kind == "jsonl":
        return _retry_jsonl(store, record, redactor)
    if kind == "otlp":
        return _retry_otlp(store, record, redactor)
    return RetryOutcome(
        record.id,
        False,
        f"records from {kind!r} cannot be retried one by one; import the source again "
        "(imports are idempotent)",
    )


def _retry_jsonl(store: EventStore, record: QuarantinedInput, redactor: Redactor) -> RetryOutcome:
    line_no = _line_number(record.location)
    raw = record.raw.encode("utf-8", errors="surrogateescape")
    parsed = parse_line(line_no, raw, store.catalogue, redactor)
    if isinstance(parsed, BadLine):
        return _still_failing(store, record, parsed.reason)
    try:
        result = store.append_batch(parsed.run_id, [parsed.event], parsed.seq)
    except REFUSALS as exc:
        return _still_failing(store, record, str(exc))
    (position,) = result.positions
    what = "was already stored" if result.duplicate else "stored"
    return _resolved(store, record, f"{what} at position {position} (run {parsed.run_id})")


def _retry_otlp(store: EventStore, record: QuarantinedInput, redactor: Redactor) -> RetryOutcome:
    from .otlp.pipeline import OtlpIngest
    from .otlp.span_model import RequestError
    from .otlp.spans import decode_json, decode_protobuf

    raw = record.raw
    try:
        if raw.startswith("base64:"):
            decoded = decode_protobuf(base64.b64decode(raw[len("base64:") :]))
        else:
            decoded = decode_json(raw.encode("utf-8", errors="surrogateescape"))
    except (RequestError, ValueError) as exc:
        return _still_failing(store, record, str(exc))
    if decoded.rejected:
        return _still_failing(store, record, decoded.rejected[0].reason)
    if not decoded.spans:
        return _still_failing(store, record, "the record holds no spans")
    ingest = OtlpIngest(store, redactor, source=record.source)
    ingest.receive(decoded)
    traces = sorted({span.trace_id for span in decoded.spans})
    report = ingest.assemble_traces(traces)
    if report.quarantined:
        return _still_failing(store, record, report.quarantined[0].reason)
    return _resolved(
        store,
        record,
        f"{len(decoded.spans)} span(s) now in run(s) {', '.join(sorted(report.run_ids))}",
    )


def _line_number(location: str) -> int:
    parts = location.split()
    return int(parts[1]) if len(parts) == 2 and parts[0] == "line" and parts[1].isdigit() else 0


def _resolved(store: EventStore, record: QuarantinedInput, detail: str) -> RetryOutcome:
    _mark(store, record.id, resolved_at=datetime.now(UTC), resolution=detail)
    return RetryOutcome(record.id, True, detail)


def _still_failing(store: EventStore, record: QuarantinedInput, reason: str) -> RetryOutcome:
    if reason != record.reason:
        _mark(store, record.id, reason=reason)
    return RetryOutcome(record.id, False, reason)


def _mark(store: EventStore, record_id: int, **values: Any) -> None:
    with write_transaction(store.engine) as conn:
        conn.execute(
            update(quarantine_table).where(quarantine_table.c.id == record_id).values(**values)
        )
