"""The event store's write path: validation, then one transaction per batch.

The statements run on a pooled driver connection, below SQLAlchemy's execution layer (whose
per-statement work costs more than SQLite's insert itself); the engine's dialect commits, its
pool connects (with the engine's ``connect`` hooks), and driver errors are wrapped as
SQLAlchemy's, so retries, messages and fault drills treat them like any other. A connection that
ends an append cleanly is parked for the next one (:mod:`._park`), skipping the pool:

* SQLite: ``BEGIN IMMEDIATE`` (the write lock); one ``SELECT`` of the run's last seq and the
  log's last position (two indexed look-ups); the version checked; one ``executemany`` of the
  batch; ``COMMIT`` -- four statements for any batch. Appends from threads that meet a commit
  in flight share the next one (:mod:`._group`: one transaction, a savepoint per batch, one
  durable commit), each acknowledged after that commit.
* PostgreSQL: one statement, ``SELECT steplog_append(...)`` (a PL/pgSQL function, migration
  0007; ``steplog_append_one``, migration 0008, for a batch of one event: scalar arguments,
  one ``VALUES`` row) on an autocommit connection -- one round trip, its own transaction.
  The function takes the transaction-scoped position lock, then reads the run's version and
  the last position (new statements, so new snapshots under READ COMMITTED: nothing committed
  before the lock is missed) and inserts the batch only if the version is the expected one.
  Connections come from a copy of the engine's pool; parked between appends, they skip its
  pre-ping (a dead one fails the append, the park is emptied, the pool replaced and the append
  retried).

The idempotency look-up runs only when the fast path did not store the batch (a version
conflict or a unique violation): a re-send is recognised there, and its original positions are
returned.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import Pool

from ..errors import ConcurrencyError, IdempotencyError
from ..models import events_table
from ._driver import wrapped
from ._group import GroupCommit, Pending
from ._park import ConnectionPark
from ._pg_write import write_pg
from ._prepare import (
    NewEvent,
    Prepared,
    PreparedBatch,
    not_in_catalogue,
    prepare,
    prepare_batch,
    sqlite_datetime,
    sqlite_rows,
    utc,
)
from ._sqlite_write import COLUMN_NAMES, SQLITE_INSERT, Batch, Conflict, write_sqlite

if TYPE_CHECKING:
    from ..events import Catalogue

T = TypeVar("T")

POSITION_LOCK_SQL: Final = (
    # One lock per events table (its OID), so stores in other schemas never wait on each other.
    "SELECT pg_advisory_xact_lock((x'57E9106'::bigint << 32) | 'events'::regclass::oid::bigint)"
)


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Positions of an appended batch; ``duplicate`` when it was a re-send already stored."""

    positions: list[int]
    duplicate: bool = False


GC_PAUSE_MIN_EVENTS: Final = 64
"""Batches from this size on are prepared and written with the cyclic collector paused."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for one batch (as projections do per page).

    A batch's prepared events hold their UUIDs, so they stay tracked and a collection that runs
    mid-batch promotes them, until a full collection walks the caller's whole heap -- for
    objects that reference counting frees anyway at the end of the batch (appending creates no
    cycles). Re-enabled only if it was enabled on entry.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def chunks(items: list[T], size: int) -> Iterable[list[T]]:
    """``items`` in slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class BatchWriter:
    """Appends one prepared batch atomically on an engine (see the module docstring)."""

    def __init__(self, engine: Engine, catalogue: Callable[[], Catalogue]) -> None:
        self.engine = engine
        self._catalogue = catalogue
        self._sqlite = engine.dialect.name == "sqlite"
        # PostgreSQL: a pool of its own (a copy of the engine's: same connect arguments and
        # hooks), as its connections are switched to autocommit.
        self._pg_pool: Pool | None = None if self._sqlite else engine.pool.recreate()
        self._park = ConnectionPark(lambda: self._appending_pool)
        # Concurrent appends in this process share commits (see ._group).
        self._group: GroupCommit[Batch, list[int]] = GroupCommit(self._commit_group)

    @property
    def _appending_pool(self) -> Pool:
        """The pool appends check connections out of when none is parked.

        SQLite: the engine's own. PostgreSQL: a copy of the engine's pool; its pre-ping runs at
        checkout only, which parking makes rare (a first append, concurrent appends): a dead
        parked connection fails its append, the park is emptied and this pool replaced, and
        the retry (safe: re-sent ids are recognised) runs on a fresh connection.
        """
        return self._pg_pool if self._pg_pool is not None else self.engine.pool

    def _replace_pg_pool(self) -> None:
        """After a dead connection: its siblings most likely died with it (a server restart),
        so later appends start on fresh ones (what ``Engine.dispose`` does)."""
        self._park.clear()
        old = self._pg_pool
        if old is not None:
            self._pg_pool = old.recreate()
            old.dispose()

    def close(self) -> None:
        """Release the parked connections and the PostgreSQL append pool's idle ones."""
        self._park.clear()
        if self._pg_pool is not None:
            self._pg_pool.dispose()

    def append_once(
        self, run_id: str, batch: PreparedBatch, expected_version: int | None
    ) -> AppendResult:
        """One attempt: the fast path, and the idempotency look-up only if it stored nothing."""
        try:
            return AppendResult(self._driver_call(run_id, batch, expected_version))
        except Conflict as conflict:
            with self.engine.connect() as conn:
                stored = self.already_stored(conn, run_id, batch)
            if stored is not None:
                return AppendResult(stored, duplicate=True)
            assert expected_version is not None  # a conflict needs an expected version
            raise ConcurrencyError(run_id, expected_version, conflict.current) from None
        except IntegrityError:
            # One of these event ids is stored already: a re-send (perhaps of a batch whose
            # commit went through although its connection died), or a clash.
            with self.engine.connect() as conn:
                stored = self.already_stored(conn, run_id, batch)
            if stored is not None:
                return AppendResult(stored, duplicate=True)
            raise IdempotencyError(
                f"run {run_id!r}: the batch conflicts with stored events but is not a re-send "
                "of them"
            ) from None

    def _driver_call(
        self, run_id: str, batch: PreparedBatch, expected_version: int | None
    ) -> list[int]:
        """The batch committed, alone or in a group with others appending meanwhile
        (:meth:`_commit_group`); its positions once that commit is durable."""
        return self._group.submit(Batch(run_id, batch, expected_version))

    def _commit_group(self, group: list[Pending[Batch, list[int]]]) -> None:
        """``group``'s batches in one transaction on a pooled driver connection, below
        SQLAlchemy's execution layer: a lone batch as it always ran, a group with each batch
        under a savepoint, so one that fails its version check or clashes on an event id fails
        alone; one durable commit for all. The engine's dialect commits (``do_commit``: the hook
        fault drills patch); driver errors, the pool's connect errors included, are wrapped as
        SQLAlchemy's (a dead connection invalidated) so retries and messages treat them like
        any other."""
        dialect = self.engine.dialect
        pool: Pool | None = None
        pooled: Any = None
        dbapi: Any = None
        try:
            pool, pooled = self._park.take()
            dbapi = pooled.dbapi_connection
            try:
                (write_sqlite if self._sqlite else write_pg)(dbapi, dialect, group)
                dialect.do_commit(pooled)  # PostgreSQL: autocommit, committed already
            except BaseException:
                for pending in group:
                    pending.result = None  # nothing of the group was stored
                if self._sqlite and dbapi.in_transaction:
                    dbapi.rollback()
                raise
            self._park.give_back(pool, pooled)  # ended cleanly: no transaction open
            pooled = None
        except dialect.loaded_dbapi.Error as exc:
            gone = dialect.is_disconnect(exc, dbapi, None)
            if gone and pooled is not None:
                pooled.invalidate(exc)
                pooled = None
            if gone:
                self._replace_pg_pool()
            raise wrapped(dialect, "append", (), exc, gone=gone) from exc
        finally:
            if pooled is not None:
                pooled.close()

    def already_stored(
        self, conn: Connection, run_id: str, prepared: PreparedBatch
    ) -> list[int] | None:
        """Original positions if the whole batch is stored already with the same content."""
        batch = prepared.items()
        ids = prepared.ids
        columns = events_table.c
        rows = {
            row.event_id: row
            for chunk in chunks(ids, 500)
            for row in conn.execute(
                select(
                    columns.position,
                    columns.event_id,
                    columns.run_id,
                    columns.seq,
                    columns.type,
                    columns.schema_version,
                    columns.payload,
                ).where(columns.event_id.in_(chunk))
            ).all()
        }
        if not rows:
            return None
        catalogue = self._catalogue()
        for item in batch:
            row = rows.get(item.event_id)
            if row is None:
                raise IdempotencyError(
                    f"run {run_id!r}: event {item.event_id} ({item.type}) is new but other events "
                    "of its batch are already stored; a batch is stored whole or not at all"
                )
            payload = row.payload
            stored_version, stored_payload = catalogue.upcast(
                row.type,
                row.schema_version,
                json.loads(payload) if isinstance(payload, str | bytes) else payload,
            )
            same = (
                row.run_id == run_id
                and row.type == item.type
                and stored_version == item.schema_version
                and stored_payload == json.loads(item.payload_json)
            )
            if not same:
                raise IdempotencyError(
                    f"event id {item.event_id} is already stored (run {row.run_id!r}, seq "
                    f"{row.seq}, {row.type}) with different content; event ids must be unique"
                )
        return [rows[item.event_id].position for item in batch]


def insert_rows(
    conn: Connection, run_id: str, seq: int, position: int, batch: list[Prepared]
) -> None:
    """Insert ``batch`` from ``seq`` at ``position`` on ``conn`` (the caller's transaction)."""
    now = datetime.now(UTC)
    if conn.dialect.name == "sqlite":
        now_text = sqlite_datetime(now)
        conn.exec_driver_sql(SQLITE_INSERT, sqlite_rows(run_id, seq, position, batch, now_text))
        return
    conn.exec_driver_sql(
        f"INSERT INTO events ({COLUMN_NAMES}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        [
            (
                position + i,
                item.event_id,
                run_id,
                seq + i,
                item.type,
                item.schema_version,
                now if item.recorded_at is None else utc(item.recorded_at),
                item.payload_json,
            )
            for i, item in enumerate(batch)
        ],
    )


def lock_positions(conn: Connection) -> None:
    """Take the position lock in ``conn``'s transaction (SQLite's ``BEGIN IMMEDIATE`` holds it
    already)."""
    if conn.dialect.name != "sqlite":
        conn.exec_driver_sql(POSITION_LOCK_SQL)


__all__ = [  # the write path's names, those of .store_prepare included (imported from here)
    "COLUMN_NAMES",
    "GC_PAUSE_MIN_EVENTS",
    "POSITION_LOCK_SQL",
    "SQLITE_INSERT",
    "AppendResult",
    "BatchWriter",
    "NewEvent",
    "Prepared",
    "PreparedBatch",
    "chunks",
    "gc_paused",
    "insert_rows",
    "lock_positions",
    "not_in_catalogue",
    "prepare",
    "prepare_batch",
    "sqlite_datetime",
    "sqlite_rows",
    "utc",
]
