"""Quarantine: input that could not be stored, kept verbatim with the reason, beside the log.

Nothing here touches the events table. The store's methods of the same names delegate here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError

from ..models import quarantine_table
from ._engine import write_transaction
from ._faults import classify, explain
from ._prepare import utc

if TYPE_CHECKING:
    from ..events import JsonDict
    from ._read import Reader


@dataclass(frozen=True, slots=True)
class QuarantinedInput:
    """Input that could not be stored, kept verbatim with the reason."""

    id: int
    received_at: datetime
    source: str
    location: str
    reason: str
    raw: str
    resolved_at: datetime | None = None
    resolution: str | None = None

    def to_json(self) -> JsonDict:
        """JSON-friendly form."""
        return {
            "id": self.id,
            "received_at": self.received_at.isoformat(),
            "source": self.source,
            "location": self.location,
            "reason": self.reason,
            "raw": self.raw,
            "resolved_at": self.resolved_at.isoformat() if self.resolved_at else None,
            "resolution": self.resolution,
        }


def quarantine(engine: Engine, *, source: str, location: str, reason: str, raw: str) -> int:
    """Keep input that could not be stored, verbatim, with the reason; return its id (see
    :func:`quarantine_in`), in a transaction of its own."""
    try:  # not retried: a re-sent record would be kept twice after an ambiguous commit
        with write_transaction(engine) as conn:
            return quarantine_in(conn, source=source, location=location, reason=reason, raw=raw)
    except DBAPIError as exc:
        raise explain(engine, exc) from (None if classify(exc) != "other" else exc)


def quarantine_in(conn: Connection, *, source: str, location: str, reason: str, raw: str) -> int:
    """:func:`quarantine` on ``conn``, inside its transaction; return the record's id.

    Everything kept is redacted with the built-in kinds (structurally: see
    :meth:`~steplog.redaction.Redactor.document`), whichever door it came through.

    The same record (source, location and raw content) still waiting in quarantine is kept
    once: re-running an import does not pile up copies; the reason is brought up to date.
    """
    from ..redaction import builtin_redactor  # here: opening a store to read needs none of it

    scrub = builtin_redactor()  # the last line: every door redacted already, with its patterns
    row = {
        "received_at": datetime.now(UTC),
        "source": storable(scrub.text(source))[:500],
        "location": storable(scrub.text(location))[:200],
        "reason": storable(scrub.text(reason)),
        "raw": storable(scrub.document(raw)),
    }
    q = quarantine_table.c
    same = select(q.id).where(
        q.source == row["source"],
        q.location == row["location"],
        q.raw == row["raw"],
        q.resolved_at.is_(None),
    )
    existing = conn.execute(same.limit(1)).scalar()
    if existing is not None:
        conn.execute(
            update(quarantine_table)
            .where(q.id == existing)
            .values(reason=row["reason"], received_at=row["received_at"])
        )
        return int(existing)
    result = conn.execute(insert(quarantine_table).values(row))
    key = result.inserted_primary_key
    return int(key[0]) if key else 0


def quarantined(
    store: Reader, *, after_id: int, limit: int, source: str | None, resolved: bool | None
) -> list[QuarantinedInput]:
    """Quarantined input, oldest first, optionally from one ``source`` only; ``resolved``:
    False lists records still waiting, True those a retry stored, None both."""
    query = (
        select(quarantine_table)
        .where(quarantine_table.c.id > after_id)
        .order_by(quarantine_table.c.id)
        .limit(limit)
    )
    if source is not None:
        query = query.where(quarantine_table.c.source == source)
    if resolved is not None:
        column = quarantine_table.c.resolved_at
        query = query.where(column.is_not(None) if resolved else column.is_(None))
    rows = store._reading(lambda conn: conn.execute(query).all())
    return [
        QuarantinedInput(
            id=row.id,
            received_at=utc(row.received_at),
            source=row.source,
            location=row.location,
            reason=row.reason,
            raw=row.raw,
            resolved_at=utc(row.resolved_at) if row.resolved_at else None,
            resolution=row.resolution,
        )
        for row in rows
    ]


def count_quarantined(store: Reader) -> int:
    """How many records sit in quarantine, not yet resolved by a retry."""
    query = (
        select(func.count())
        .select_from(quarantine_table)
        .where(quarantine_table.c.resolved_at.is_(None))
    )
    return store._reading(lambda conn: int(conn.execute(query).scalar_one()))


def purge_quarantined(
    engine: Engine, *, record_ids: Sequence[int], source: str | None, resolved_only: bool
) -> int:
    """Delete quarantine records (never events): the given ids, or every record from
    ``source``, or every one; ``resolved_only`` keeps those still waiting. Returns how many."""
    q = quarantine_table.c
    query = delete(quarantine_table)
    if record_ids:
        query = query.where(q.id.in_(list(record_ids)))
    if source is not None:
        query = query.where(q.source == source)
    if resolved_only:
        query = query.where(q.resolved_at.is_not(None))
    try:
        with write_transaction(engine) as conn:
            return int(conn.execute(query).rowcount or 0)
    except DBAPIError as exc:
        raise explain(engine, exc) from (None if classify(exc) != "other" else exc)


def storable(text_value: str) -> str:
    """Text any engine accepts: NULs and lone surrogates escaped, never dropped silently."""
    escaped = text_value.replace("\x00", "\\x00")
    return escaped.encode("utf-8", errors="backslashreplace").decode("utf-8")
