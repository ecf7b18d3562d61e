"""PostgreSQL's side of an append: the call of the server-side append function (migrations
0007 and 0008) for one batch, and a group commit's batches in one transaction -- pipelined, one
round trip for all (see :mod:`._append`, :mod:`._group`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Final

from ._driver import wrapped
from ._group import Pending
from ._prepare import PreparedBatch, utc
from ._sqlite_write import Batch, Conflict

PG_APPEND: Final = (
    "SELECT steplog_append(%s::text, %s::integer, %s::timestamptz, %s::text, %s::text, "
    "%s::text, %s::text, %s::text)"
)
"""The server-side append (migration 0007): one statement, one round trip in autocommit."""
PG_APPEND_ONE: Final = (
    "SELECT steplog_append_one(%s::text, %s::integer, %s::timestamptz, %s::uuid, %s::text, "
    "%s::integer, %s::timestamptz, %s::jsonb)"
)
"""A single event's append (migration 0008): its columns as scalars, one ``VALUES`` row."""
PG_CHUNK_EVENTS: Final = 10_000
PG_CHUNK_CHARS: Final = 64 * 1024 * 1024
"""A larger batch is sent in chunks (PostgreSQL caps a JSON document's size), one function call
each, inside one explicit transaction: still atomic."""


def pg_append(
    dbapi: Any, run_id: str, batch: PreparedBatch, expected_version: int | None
) -> list[int]:
    """``batch`` through ``steplog_append`` on an autocommit connection: one statement (its own
    transaction), or one explicit transaction around a huge batch's chunks."""
    if not dbapi.autocommit:
        dbapi.autocommit = True
    now = datetime.now(UTC)
    parts = list(pg_chunks(batch))
    if len(parts) == 1:
        first = pg_call(dbapi, run_id, expected_version, now, batch)
    else:
        with dbapi.transaction():
            first = pg_call(dbapi, run_id, expected_version, now, parts[0])
            version = None if expected_version is None else expected_version + len(parts[0])
            for part in parts[1:]:
                pg_call(dbapi, run_id, version, now, part)
                version = None if version is None else version + len(part)
    return list(range(first, first + len(batch)))


def write_pg(dbapi: Any, dialect: Any, group: list[Pending[Batch, list[int]]]) -> None:
    """PostgreSQL: a lone batch is one ``steplog_append`` call in autocommit (its own
    transaction, one round trip); a group is one transaction: pipelined (:func:`pg_pipelined`,
    one round trip for all), or, when that cannot hold it or one of its batches raised, each
    batch in a nested one."""
    if len(group) == 1:
        group[0].result = pg_append(dbapi, *group[0].item)
        return
    if not dbapi.autocommit:
        dbapi.autocommit = True
    if pg_pipelined(dbapi, dialect, group):
        return
    with dbapi.transaction():
        for pending in group:
            pg_append_alone(dbapi, dialect, pending)


def pg_pipelined(dbapi: Any, dialect: Any, group: list[Pending[Batch, list[int]]]) -> bool:
    """The group in one transaction sent as one pipeline (``BEGIN``, a ``steplog_append`` call
    per batch, ``COMMIT``: one round trip, where a savepoint around each batch costs three).

    A batch whose version is stale inserts nothing (the function checks before inserting) and
    fails alone with its :class:`Conflict`. No savepoint is needed for that, only for a batch
    that *raises* (an event id stored already): then the transaction rolls back whole, nothing
    of the group is stored, and False sends the group again batch by batch, each in a nested
    transaction. False too, untouched, for a group holding a batch sent in chunks (huge), or
    when the client library has no pipeline mode."""
    pipeline = getattr(dialect.loaded_dbapi, "Pipeline", None)
    if pipeline is None or not pipeline.is_supported():  # libpq before 14: no pipeline mode
        return False
    now = datetime.now(UTC)
    statements = []
    for pending in group:
        run_id, batch, expected_version = pending.item
        if len(batch) > 1 and next(iter(pg_chunks(batch))) is not batch:
            return False
        statements.append(pg_statement(run_id, expected_version, now, batch))
    cursors = [dbapi.cursor() for _ in group]
    try:
        with dbapi.pipeline(), dbapi.transaction():
            for cursor, (sql, params) in zip(cursors, statements, strict=True):
                cursor.execute(sql, params)
        firsts = [cursor.fetchone()[0] for cursor in cursors]
    except dialect.loaded_dbapi.IntegrityError:
        return False
    finally:
        for cursor in cursors:
            cursor.close()
    for pending, first in zip(group, firsts, strict=True):
        if first < 0:  # nothing inserted: the run's version was not the expected one
            pending.error = Conflict(-1 - first)
        else:
            pending.result = list(range(first, first + len(pending.item.batch)))
    return True


def pg_append_alone(dbapi: Any, dialect: Any, pending: Pending[Batch, list[int]]) -> None:
    """One batch of a group in a nested transaction (a savepoint): stored, or rolled back
    with its error kept."""
    try:
        with dbapi.transaction():
            pending.result = pg_append(dbapi, *pending.item)
    except Conflict as conflict:
        pending.error = conflict
    except dialect.loaded_dbapi.IntegrityError as exc:  # an event id stored already
        pending.error = wrapped(dialect, "append", (), exc, gone=False)


def pg_call(
    dbapi: Any, run_id: str, expected_version: int | None, now: datetime, batch: PreparedBatch
) -> int:
    """One append function call: the first position (a stale version raises Conflict)."""
    return pg_first_position(dbapi, *pg_statement(run_id, expected_version, now, batch))


def pg_statement(
    run_id: str, expected_version: int | None, now: datetime, batch: PreparedBatch
) -> tuple[str, tuple[Any, ...]]:
    """The call appending ``batch`` (one chunk): ``steplog_append`` with the columns as arrays,
    or, for a batch of one event, ``steplog_append_one`` with scalars (no arrays for the server
    to parse and unnest)."""
    if len(batch) == 1:
        ((type_name, _, version),) = batch.kinds
        (at,) = batch.times
        one = (batch.hexes[0], type_name, version, None if at is None else utc(at))
        return PG_APPEND_ONE, (run_id, expected_version, now, *one, batch.payloads[0])
    times = None
    if batch.times.count(None) != len(batch):
        times = (
            "{"
            + ",".join("NULL" if at is None else utc(at).isoformat() for at in batch.times)
            + "}"
        )
    params = (
        run_id,
        expected_version,
        now,
        "{" + ",".join(batch.hexes) + "}",
        json.dumps(list(batch.types)),
        "{" + ",".join(map(str, batch.versions)) + "}",
        times,
        "[" + ",".join(batch.payloads) + "]",
    )
    return PG_APPEND, params


def pg_first_position(dbapi: Any, sql: str, params: tuple[Any, ...]) -> int:
    """Run one of the append functions; the batch's first position (a stale expected version,
    which the function answers with ``-1 - current version``, raises :class:`Conflict`)."""
    with dbapi.cursor() as cursor:
        cursor.execute(sql, params)
        (first,) = cursor.fetchone()
    if first < 0:  # nothing inserted: the run's version was not the expected one
        raise Conflict(-1 - first)
    return int(first)


def pg_chunks(batch: PreparedBatch) -> Iterable[PreparedBatch]:
    """``batch`` in parts of at most ``PG_CHUNK_EVENTS`` events and about ``PG_CHUNK_CHARS``
    characters of payload (one part, itself, almost always)."""
    sizes = list(map(len, batch.payloads))
    if len(batch) <= PG_CHUNK_EVENTS and sum(sizes) < PG_CHUNK_CHARS:
        yield batch
        return
    start = 0
    size = 0
    for index, length in enumerate(sizes):
        if index > start and (index - start >= PG_CHUNK_EVENTS or size + length > PG_CHUNK_CHARS):
            yield batch.part(start, index)
            start, size = index, 0
        size += length
    yield batch.part(start, len(sizes))


__all__ = [
    "PG_APPEND",
    "PG_APPEND_ONE",
    "pg_append",
    "pg_call",
    "pg_chunks",
    "pg_pipelined",
    "pg_statement",
    "write_pg",
]
