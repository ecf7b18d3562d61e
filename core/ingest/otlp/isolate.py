"""One trace fails alone: a round that raises on data is split into one round per trace, and a
trace whose own round still raises is released from staging into the quarantine.

A round is one transaction for up to :data:`~.pipeline.TRACES_PER_ROUND` traces, so one trace
that makes it raise (a defect the mapping did not foresee, a value the database refuses) would
roll back every other trace with it, round after round. Split, the others are stored; the one
that fails is deleted from staging and kept in the quarantine as one OTLP/JSON request with the
reason (``steplog quarantine retry`` can take it again once fixed). Failures of the database
itself (unreachable, locked, full, read-only) are not the trace's fault: they propagate, the
round is retried later, and nothing is quarantined for them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic_core import from_json
from sqlalchemy.exc import InterfaceError, OperationalError

from ...errors import (
    ConcurrencyError,
    DatabaseFullError,
    DatabaseLockedError,
    DatabaseReadOnlyError,
    DatabaseUnavailableError,
    SchemaNotCurrentError,
)
from ...store import EventStore, quarantine_in, with_retries, write_transaction
from ..report import Rejected
from .span_model import Span

INFRASTRUCTURE = (
    DatabaseUnavailableError,
    DatabaseLockedError,
    DatabaseFullError,
    DatabaseReadOnlyError,
    SchemaNotCurrentError,
    ConcurrencyError,
    OperationalError,
    InterfaceError,
)
"""Failures of the store, not of a trace: a round that meets one is retried, not split."""


def is_infrastructure(exc: BaseException) -> bool:
    """Whether ``exc`` is the store failing rather than a trace's data."""
    return isinstance(exc, INFRASTRUCTURE)


def release(store: EventStore, source: str, trace_id: str, reason: str) -> Rejected | None:
    """Delete the staged spans of ``trace_id`` and keep them in the quarantine with ``reason``,
    in one transaction; the record kept (``None`` when nothing was staged any more)."""
    mark = "?" if store._sqlite else "%s"

    def attempt() -> Rejected | None:
        with write_transaction(store.engine) as conn:
            rows = conn.exec_driver_sql(
                f"DELETE FROM otlp_spans WHERE trace_id = {mark} RETURNING body", (trace_id,)
            ).all()
            if not rows:
                return None
            bad = Rejected(f"trace {trace_id} ({len(rows)} spans)", reason, _request(rows))
            quarantine_in(
                conn, source=source, location=bad.location, reason=bad.reason, raw=bad.raw
            )
            return bad

    return with_retries(store.engine, attempt)


def _request(rows: Sequence[Any]) -> str:
    """Staged bodies (already redacted) as one OTLP/JSON request; as they are when one does not
    decode (the reason the trace failed may be that it does not)."""
    request: dict[str, Any] = {"resourceSpans": []}
    try:
        for (body,) in rows:
            request["resourceSpans"].extend(
                Span.from_compact(from_json(body)).to_json()["resourceSpans"]
            )
        return json.dumps(request)
    except Exception:
        return json.dumps({"staged_spans": [str(body) for (body,) in rows]})
