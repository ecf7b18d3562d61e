"""SQLite's side of an append: the statements of one batch inside the write transaction, and
one batch of a group commit under a savepoint of its own (see :mod:`._append`, :mod:`._group`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

from ._driver import wrapped
from ._group import Pending
from ._prepare import PreparedBatch, batch_rows, sqlite_datetime

COLUMN_NAMES: Final = "position, event_id, run_id, seq, type, schema_version, recorded_at, payload"
SQLITE_INSERT: Final = f"INSERT INTO events ({COLUMN_NAMES}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_SQLITE_PLACE: Final = (
    "SELECT (SELECT max(seq) FROM events WHERE run_id = ?), (SELECT max(position) FROM events)"
)
"""The run's last seq and the log's last position (two indexed look-ups), read under the write
lock. A plain ``INSERT`` follows: an ``INSERT ... SELECT`` from ``events`` itself (with
``RETURNING``) costs SQLite two temporary tables per statement, more than this look-up."""


class Conflict(Exception):
    """The fast path stored nothing: the run's version was not the expected one."""

    def __init__(self, current: int) -> None:
        super().__init__(current)
        self.current = current


def sqlite_append(
    dbapi: Any, run_id: str, batch: PreparedBatch, expected_version: int | None
) -> list[int]:
    """``batch`` in the open ``BEGIN IMMEDIATE`` transaction (the write lock: nothing else
    commits until it ends): the run's version and the last position looked up, the version
    checked, then every row in one ``executemany``."""
    ((last_seq, last_position),) = dbapi.execute(_SQLITE_PLACE, (run_id,)).fetchall()
    version = 0 if last_seq is None else last_seq + 1
    if expected_version is not None and version != expected_version:
        raise Conflict(version)
    position = 1 if last_position is None else last_position + 1
    now_text = sqlite_datetime(datetime.now(UTC))
    dbapi.executemany(SQLITE_INSERT, batch_rows(run_id, version, position, batch, now_text))
    return list(range(position, position + len(batch)))


class Batch(NamedTuple):
    """One caller's append, as :func:`_sqlite_append` takes it."""

    run_id: str
    batch: PreparedBatch
    expected_version: int | None


def sqlite_append_alone(dbapi: Any, dialect: Any, pending: Pending[Batch, list[int]]) -> None:
    """One batch of a group under a savepoint: stored, or rolled back with its error kept."""
    dbapi.execute("SAVEPOINT steplog_batch")
    try:
        pending.result = sqlite_append(dbapi, *pending.item)
    except Conflict as conflict:
        dbapi.execute("ROLLBACK TO steplog_batch")
        pending.error = conflict
    except dialect.loaded_dbapi.IntegrityError as exc:  # an event id stored already
        dbapi.execute("ROLLBACK TO steplog_batch")
        pending.error = wrapped(dialect, "append", (), exc, gone=False)
    dbapi.execute("RELEASE steplog_batch")


def write_sqlite(dbapi: Any, dialect: Any, group: list[Pending[Batch, list[int]]]) -> None:
    """SQLite: ``BEGIN IMMEDIATE`` (the write lock), then the group's batches (see
    :meth:`._append.BatchWriter._commit_group`); the caller commits."""
    dbapi.execute("BEGIN IMMEDIATE")
    if len(group) == 1:
        group[0].result = sqlite_append(dbapi, *group[0].item)
        return
    for pending in group:
        sqlite_append_alone(dbapi, dialect, pending)


__all__ = [
    "COLUMN_NAMES",
    "SQLITE_INSERT",
    "Batch",
    "Conflict",
    "sqlite_append",
    "sqlite_append_alone",
    "write_sqlite",
]
