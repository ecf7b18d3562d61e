"""The event store's write path: validation, then one transaction per batch.

SQLAlchemy begins and commits (so its hooks, pool and error handling apply); the statements in
between run on the driver's own connection, below SQLAlchemy's execution layer (whose
per-statement work costs more than SQLite's insert itself):

* SQLite: ``BEGIN IMMEDIATE`` (the write lock), one indexed query for the run's version and the
  last position, one ``executemany``, ``COMMIT`` -- four statements.
* PostgreSQL: the transaction-scoped advisory lock and one ``INSERT ... SELECT`` -- which reads
  the last position and the run's version *after* the lock (a new statement, so a new snapshot
  under READ COMMITTED) and inserts only if the version is the expected one -- sent together in
  psycopg's pipeline mode; with the pool's pre-ping, the ``BEGIN`` psycopg sends first and the
  ``COMMIT``, four round trips.

The idempotency look-up runs only when the fast path did not store the batch (a version
conflict or a unique violation): a re-send is recognised there, and its original positions are
returned.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import DBAPIError, IntegrityError
from uuid6 import uuid7

from .database import write_transaction
from .errors import ConcurrencyError, IdempotencyError, InvalidEventError, PayloadTooLargeError
from .models import events_table

if TYPE_CHECKING:
    from .events import Catalogue, Event

T = TypeVar("T")
_IDLE: Final = 0  # psycopg.pq.TransactionStatus.IDLE (psycopg is imported only on PostgreSQL)

POSITION_LOCK_SQL: Final = (
    # One lock per events table (its OID), so stores in other schemas never wait on each other.
    "SELECT pg_advisory_xact_lock((x'57E9106'::bigint << 32) | 'events'::regclass::oid::bigint)"
)
COLUMN_NAMES: Final = "position, event_id, run_id, seq, type, schema_version, recorded_at, payload"
_SQLITE_HEADS: Final = (
    "SELECT (SELECT max(seq) FROM events WHERE run_id = ?), (SELECT max(position) FROM events)"
)
SQLITE_INSERT: Final = f"INSERT INTO events ({COLUMN_NAMES}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_PG_INSERT: Final = f"""\
INSERT INTO events ({COLUMN_NAMES})
SELECT h.p + u.n, u.id, %s, h.v + u.n - 1, u.type, u.ver, u.at, u.payload::jsonb
FROM (SELECT coalesce((SELECT max(position) FROM events), 0) AS p,
             coalesce((SELECT max(seq) + 1 FROM events WHERE run_id = %s), 0) AS v) AS h,
     (VALUES {{rows}}) AS u(n, id, type, ver, at, payload)
WHERE %s::int IS NULL OR h.v = %s::int
RETURNING position"""
_PG_ROW: Final = "({n:d}, %s::uuid, %s, %s::int, %s::timestamptz, %s)"


@functools.lru_cache(maxsize=64)
def _pg_insert_sql(size: int) -> str:
    """The one-statement insert for a batch of ``size`` rows (scalar parameters: psycopg dumps
    them in C, where arrays cost a Python pass per array)."""
    return _PG_INSERT.format(rows=", ".join(_PG_ROW.format(n=n) for n in range(1, size + 1)))


_NUL_ESCAPE: Final = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
"""A JSON escape of NUL (not a literal backslash followed by ``u0000``)."""


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended, with the client-generated id that makes re-sends safe."""

    event: Event
    event_id: uuid.UUID = field(default_factory=uuid7)
    recorded_at: datetime | None = None
    """When it happened; defaults to the time of the append (imports keep the original)."""

    @classmethod
    def of(cls, event: Event, event_id: uuid.UUID) -> NewEvent:
        """``NewEvent(event, event_id)``, built for hot paths (a recorder buffers every event
        through it): the slots are set directly, not through the frozen class's checks."""
        new = object.__new__(cls)
        _SET_EVENT(new, event)
        _SET_ID(new, event_id)
        _SET_AT(new, None)
        return new


_SET_EVENT = NewEvent.__dict__["event"].__set__
_SET_ID = NewEvent.__dict__["event_id"].__set__
_SET_AT = NewEvent.__dict__["recorded_at"].__set__


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Positions of an appended batch; ``duplicate`` when it was a re-send already stored."""

    positions: list[int]
    duplicate: bool = False


class Prepared(NamedTuple):
    """An event validated and serialized, ready for the driver (a tuple: built per event)."""

    event_id: uuid.UUID
    type: str
    schema_version: int
    payload_json: str
    recorded_at: datetime | None


class _Conflict(Exception):
    """The fast path stored nothing: the run's version was not the expected one."""

    def __init__(self, current: int) -> None:
        super().__init__(current)
        self.current = current


def prepare(events: Sequence[Event | NewEvent], catalogue: Catalogue, limit: int) -> list[Prepared]:
    """Validate, serialize and size-check a batch before touching the database.

    This runs for every appended event, so it sticks to dict lookups: events are pydantic
    models validated when they were built; what is left to check is that their class is
    the catalogue's, their ids are unique within the batch, and their size.
    """
    prepared: list[Prepared] = []
    name_of = catalogue.name_of
    append = prepared.append
    for index, item in enumerate(events):
        new = item if type(item) is NewEvent else _new_event(item)
        event = new.event
        kind = type(event)
        type_name = name_of(kind)
        if type_name is None:
            raise not_in_catalogue(catalogue, index, event)
        try:
            # The model's own serializer, as ``model_dump_json()`` calls it (same bytes),
            # without that method's keyword handling: this is the per-event cost of appending.
            payload_json = kind.__pydantic_serializer__.to_json(event).decode()
        except (ValueError, UnicodeError) as exc:
            raise InvalidEventError(
                f"event #{index} ({type_name}) cannot be stored as JSON: {exc}"
            ) from None
        if "\\u0000" in payload_json and _NUL_ESCAPE.search(payload_json):
            raise InvalidEventError(
                f"event #{index} ({type_name}) contains a NUL character (\\u0000), which "
                "PostgreSQL cannot store; remove or escape it"
            )
        # A str of n characters encodes to at most 4n bytes: count exactly only near the limit.
        if len(payload_json) * 4 > limit and len(payload_json.encode()) > limit:
            raise PayloadTooLargeError(
                f"event #{index} ({type_name}, id {new.event_id}) has a "
                f"{len(payload_json.encode()):,}-byte payload; the limit is {limit:,} bytes"
            )
        append(
            Prepared(new.event_id, type_name, kind.schema_version, payload_json, new.recorded_at)
        )
    if len({entry.event_id.int for entry in prepared}) != len(prepared):
        seen: set[uuid.UUID] = set()
        for position, entry in enumerate(prepared):
            if entry.event_id in seen:
                raise InvalidEventError(
                    f"event #{position} ({entry.type}) repeats id {entry.event_id}"
                )
            seen.add(entry.event_id)
    return prepared


def _new_event(item: Event | NewEvent) -> NewEvent:
    return item if isinstance(item, NewEvent) else NewEvent(item)


def not_in_catalogue(catalogue: Catalogue, index: int, event: object) -> InvalidEventError:
    from .events import Event

    if not isinstance(event, Event):
        return InvalidEventError(f"event #{index} is a {type(event).__name__}, not a steplog Event")
    name = event.type_name()
    if name in catalogue:
        return InvalidEventError(f"event #{index}: {name} is not the catalogue's {name} model")
    return InvalidEventError(
        f"event #{index}: unknown event type {name!r}; register it in the catalogue"
    )


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive time is taken to be UTC already (never local time)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def sqlite_datetime(moment: datetime) -> str:
    """UTC, in the text format SQLAlchemy's SQLite ``DateTime`` reads back
    (``YYYY-MM-DD HH:MM:SS.ffffff``), from the C ``isoformat``: this runs for every event."""
    return utc(moment).isoformat(" ", "microseconds")[:26]


def sqlite_rows(
    run_id: str, seq: int, position: int, batch: Sequence[Prepared], now_text: str
) -> list[tuple[Any, ...]]:
    """``batch``'s rows for :data:`SQLITE_INSERT`, from ``seq`` at ``position`` (``now_text``
    where an event has no recorded time): the one place the SQLite row format is written."""
    return [
        (
            position + i,
            item.event_id.hex,
            run_id,
            seq + i,
            item.type,
            item.schema_version,
            now_text if item.recorded_at is None else sqlite_datetime(item.recorded_at),
            item.payload_json,
        )
        for i, item in enumerate(batch)
    ]


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

    def close(self) -> None:
        """Nothing of its own to release (appends use the store's engine)."""

    def append_once(
        self, run_id: str, batch: list[Prepared], expected_version: int | None
    ) -> AppendResult:
        """One attempt: the fast path, and the idempotency look-up only if it stored nothing."""
        try:
            if self._sqlite:
                positions = self._driver_call(self._sqlite_append, run_id, batch, expected_version)
            else:
                positions = self._driver_call(self._pg_append, run_id, batch, expected_version)
            return AppendResult(positions)
        except _Conflict as conflict:
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
        self,
        body: Callable[[Any, str, list[Prepared], int | None], list[int]],
        run_id: str,
        batch: list[Prepared],
        expected_version: int | None,
    ) -> list[int]:
        """``body`` on the driver connection of a SQLAlchemy write transaction.

        SQLAlchemy begins (``BEGIN IMMEDIATE`` on SQLite) and commits, so its hooks and error
        handling apply; the statements in between run on the driver, their errors wrapped as
        SQLAlchemy's (a dead connection invalidated) so retries and messages treat them alike.
        """
        engine = self.engine
        dialect = engine.dialect
        with write_transaction(engine) as conn:
            dbapi_connection = conn.connection.dbapi_connection
            try:
                return body(dbapi_connection, run_id, batch, expected_version)
            except dialect.loaded_dbapi.Error as exc:
                gone = dialect.is_disconnect(exc, dbapi_connection, None)
                if gone:
                    conn.invalidate(exc)
                raise DBAPIError.instance(
                    "append",
                    (),
                    exc,
                    dialect.loaded_dbapi.Error,
                    connection_invalidated=gone,
                    dialect=dialect,
                ) from exc

    @staticmethod
    def _sqlite_append(
        dbapi: Any, run_id: str, batch: list[Prepared], expected_version: int | None
    ) -> list[int]:
        now_text = sqlite_datetime(datetime.now(UTC))
        last_seq, last_position = dbapi.execute(_SQLITE_HEADS, (run_id,)).fetchone()
        current = 0 if last_seq is None else last_seq + 1
        if expected_version is not None and expected_version != current:
            raise _Conflict(current)
        position = (last_position or 0) + 1
        dbapi.executemany(SQLITE_INSERT, sqlite_rows(run_id, current, position, batch, now_text))
        return list(range(position, position + len(batch)))

    @staticmethod
    def _pg_append(
        dbapi: Any, run_id: str, batch: list[Prepared], expected_version: int | None
    ) -> list[int]:
        now = datetime.now(UTC)
        params: list[Any] = [run_id, run_id, expected_version, expected_version]
        rows: list[Any] = []
        for item in batch:
            at = now if item.recorded_at is None else utc(item.recorded_at)
            rows += (item.event_id, item.type, item.schema_version, at, item.payload_json)
        params[2:2] = rows  # in placeholder order: run id twice, the rows, the version twice
        inserted = dbapi.cursor()
        with dbapi.pipeline():  # the lock and the insert in one round trip
            dbapi.execute(POSITION_LOCK_SQL)
            inserted.execute(_pg_insert_sql(len(batch)), params)
        positions = sorted(row[0] for row in inserted.fetchall())
        if not positions:  # nothing inserted: the run's version was not the expected one
            with dbapi.cursor() as check:
                check.execute("SELECT max(seq) FROM events WHERE run_id = %s", (run_id,))
                row = check.fetchone()
            raise _Conflict(0 if row is None or row[0] is None else int(row[0]) + 1)
        return positions

    def already_stored(
        self, conn: Connection, run_id: str, batch: list[Prepared]
    ) -> list[int] | None:
        """Original positions if the whole batch is stored already with the same content."""
        ids = [item.event_id for item in batch]
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
