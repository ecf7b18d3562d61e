"""Statements sent straight through the driver's cursor, with SQLAlchemy's error handling.

Hot paths skip SQLAlchemy's execution layer (its per-row parameter and result processing cost
more than the statements), and PostgreSQL's ``COPY`` has no SQLAlchemy form at all. A driver
error raised there is wrapped as SQLAlchemy would have wrapped it, and a dead connection is
invalidated, so :func:`~steplog.store.with_retries` and the error messages treat it like any
other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Dialect
from sqlalchemy.exc import DBAPIError, StatementError


@contextmanager
def driver_cursor(conn: Connection, statement: str, params: Sequence[Any] = ()) -> Iterator[Any]:
    """A cursor of ``conn``'s driver connection; a driver error in the block is raised as
    SQLAlchemy's :class:`DBAPIError` (``statement`` and ``params`` name it), the connection
    invalidated when it is gone."""
    dialect = conn.dialect
    dbapi_connection = conn.connection
    cursor = dbapi_connection.cursor()
    try:
        yield cursor
    except dialect.loaded_dbapi.Error as exc:
        gone = dialect.is_disconnect(exc, dbapi_connection.dbapi_connection, cursor)
        if gone:
            conn.invalidate(exc)
        raise wrapped(dialect, statement, params, exc, gone=gone) from exc
    finally:
        if not conn.invalidated:
            cursor.close()


def wrapped(
    dialect: Dialect, statement: str, params: Sequence[Any], exc: Exception, *, gone: bool
) -> StatementError:
    """The driver error ``exc`` of ``statement`` as SQLAlchemy would have raised it (``gone``:
    the connection is dead, so a retry gets a fresh one)."""
    return DBAPIError.instance(
        statement,
        tuple(params),
        exc,
        dialect.loaded_dbapi.Error,
        connection_invalidated=gone,
        dialect=dialect,
    )


def fetch_rows(conn: Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    """Rows of ``sql`` straight from the driver's cursor."""
    with driver_cursor(conn, sql, params) as cursor:
        cursor.execute(sql, tuple(params))
        return list(cursor.fetchall())


def copy_rows(
    conn: Connection, statement: str, types: Sequence[str], rows: Iterable[Sequence[Any]]
) -> None:
    """PostgreSQL: ``COPY ... FROM STDIN (FORMAT BINARY)`` of ``rows``, whose columns have the
    PostgreSQL ``types``; a value already serialized as JSON text is sent as it is to a
    ``json``/``jsonb`` column, and ``bytes`` as they are to a ``bytea`` one (binary ``COPY``
    carries no types: bytes in a ``bytea`` slot are read as the column's binary form)."""
    from psycopg.types.json import set_json_dumps
    from psycopg.types.string import BytesBinaryDumper

    with driver_cursor(conn, statement) as cursor:
        set_json_dumps(_json_as_is, context=cursor)
        # ``bytea`` by psycopg's own bytes dumper, compiled in its C build: the one it looks up
        # for the type is ``dbapi20.Binary``'s, a Python method called per value (the same
        # bytes sent; 0.85 -> 0.55 us a row of the events' COPY)
        cursor.adapters.register_dumper(bytes, BytesBinaryDumper)
        with cursor.copy(statement) as copy:
            copy.set_types(list(types))
            for row in rows:
                copy.write_row(row)


def _json_as_is(payload: Any) -> Any:
    return payload


__all__ = ["copy_rows", "driver_cursor", "fetch_rows", "wrapped"]
