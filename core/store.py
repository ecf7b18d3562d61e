"""The event store: an append-only log of immutable events on SQLite or PostgreSQL.

Contract (the same on both engines, checked by one contract test suite):

* ``append`` is atomic per batch and optimistic: the caller states the run's expected version
  (its number of events) and a mismatch raises :class:`ConcurrencyError`.
* Re-sending an event with a stored ``event_id`` and identical content is a no-op that returns the
  original positions; the same id with different content raises :class:`IdempotencyError`.
* Positions are global and assigned inside the write lock (SQLite ``BEGIN IMMEDIATE``, a
  transaction-scoped advisory lock on PostgreSQL), so they become visible in commit order and a
  reader paging by position never skips an event committed late.
* A returned ``append`` is durably committed.
* Transient failures (a dropped connection, a server restarting, SQLite's write lock held by
  another connection) are retried with exponential backoff; what cannot be retried, or still
  fails, raises a :class:`~steplog.errors.DatabaseError` saying what to do. A retry after an
  ambiguous commit (the connection died after COMMIT was sent) is safe: the re-sent event ids
  are found stored and their original positions returned.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

from pydantic_core import from_json
from sqlalchemy import Connection, Engine, delete, func, insert, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from .database import (
    classify,
    create_engine_for,
    ensure_schema,
    explain,
    is_sqlite,
    redact,
    resolve_url,
    sqlite_busy_timeout,
    sqlite_path,
    with_retries,
    write_transaction,
)
from .driver import fetch_rows
from .errors import (
    ConcurrencyError,
    ConfigurationError,
    IdempotencyError,
    InvalidEventError,
    SteplogError,
)
from .models import events_table, quarantine_table
from .store_append import (
    GC_PAUSE_MIN_EVENTS,
    POSITION_LOCK_SQL,
    AppendResult,
    BatchWriter,
    NewEvent,
    Prepared,
    chunks,
    gc_paused,
    insert_rows,
    lock_positions,
    prepare,
    prepare_batch,
    sqlite_datetime,
    utc,
)

if TYPE_CHECKING:  # the event models (pydantic) load on first use: reading needs none of them
    from .events import Catalogue, Event, JsonDict

DEFAULT_MAX_PAYLOAD_BYTES: Final = 1024 * 1024
MAX_RUN_ID_LENGTH: Final = 255
_COLUMNS = (
    events_table.c.position,
    events_table.c.event_id,
    events_table.c.run_id,
    events_table.c.seq,
    events_table.c.type,
    events_table.c.schema_version,
    events_table.c.recorded_at,
    events_table.c.payload,
)
T = TypeVar("T")
_SELECT: Final = (
    "SELECT position, event_id, run_id, seq, type, schema_version, recorded_at, payload FROM events"
)


def _default_catalogue() -> Catalogue:
    from .events import catalogue

    return catalogue


RawRow = Sequence[Any]
"""A row as the driver returns it, in the columns of :class:`StoredEvent` (``recorded_at`` and
``payload`` undecoded on SQLite)."""


def recorded_at_of(value: Any) -> datetime:
    """A driver row's ``recorded_at`` as an aware UTC datetime (as in :class:`StoredEvent`)."""
    if type(value) is str:
        return datetime.fromisoformat(value + "+00:00")
    return value if value.tzinfo is UTC else utc(value)


class StoredEvent(NamedTuple):
    """An event as read back: its place in the log, its payload upcast to the current version.

    A named tuple: immutable, and cheap to build for every event a reader streams. The id is
    kept as the driver returned it (``event_key``) and parsed only when ``event_id`` is read.
    """

    position: int
    event_key: uuid.UUID | str
    run_id: str
    seq: int
    type: str
    schema_version: int
    recorded_at: datetime
    payload: JsonDict

    @property
    def event_id(self) -> uuid.UUID:
        """The client-generated UUIDv7 of the event."""
        key = self.event_key
        return key if isinstance(key, uuid.UUID) else _uuid_from_hex(key)

    def to_event(self, using: Catalogue | None = None) -> Event:
        """The payload as its typed event model (``using`` the default catalogue)."""
        return (using or _default_catalogue()).parse(self.type, self.payload, self.schema_version)

    def to_json(self) -> JsonDict:
        """The portable form: one JSON object per event (the JSONL line format)."""
        return {
            "position": self.position,
            "event_id": str(self.event_id),
            "run_id": self.run_id,
            "seq": self.seq,
            "type": self.type,
            "schema_version": self.schema_version,
            "recorded_at": self.recorded_at.isoformat(),
            "payload": self.payload,
        }


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


class EventStore:
    """Append-only event log; see the module docstring for the contract."""

    def __init__(
        self,
        engine: Engine,
        *,
        catalogue: Catalogue | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        retries: int = 5,
    ) -> None:
        self.engine = engine
        self._catalogue = catalogue
        self._versions: dict[str, int] | None = None
        self.max_payload_bytes = max_payload_bytes
        self.retries = retries
        """How many times a transient database failure is retried (with backoff) before
        :class:`~steplog.errors.DatabaseError`."""
        self._sqlite = is_sqlite(engine)
        self._writer = BatchWriter(engine, lambda: self.catalogue)
        if self._sqlite:
            sqlite_busy_timeout(engine.url)  # a bad ?timeout= is a clear error now, not later

    @property
    def catalogue(self) -> Catalogue:
        """The event types this store accepts (the default catalogue unless given one)."""
        if self._catalogue is None:
            self._catalogue = _default_catalogue()
        return self._catalogue

    @catalogue.setter
    def catalogue(self, value: Catalogue) -> None:
        self._catalogue = value
        self._versions = None

    @property
    def _current_versions(self) -> dict[str, int]:
        if self._versions is None:
            found = self.catalogue
            self._versions = {name: found.model(name).schema_version for name in found.names()}
        return self._versions

    @classmethod
    def open(
        cls,
        db: str | None = None,
        *,
        auto_migrate: bool | None = None,
        must_exist: bool = False,
        **kwargs: Any,
    ) -> EventStore:
        """Open the store at ``db`` (URL or SQLite path; default: see :func:`resolve_url`).

        A SQLite database is created and migrated to head automatically (``must_exist`` refuses
        to create a new file, for commands that only read); PostgreSQL must be at head already
        (``steplog db upgrade``) unless ``auto_migrate`` is true.
        """
        url = resolve_url(db)
        path = sqlite_path(url)
        if must_exist and path is not None and not path.exists():
            raise ConfigurationError(f"there is no steplog database at {path}")
        engine = create_engine_for(url)
        ensure_schema(engine, auto_migrate=auto_migrate)
        return cls(engine, **kwargs)

    def close(self) -> None:
        """Release the engine's connections."""
        self._writer.close()
        self.engine.dispose()

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return redact(self.engine.url.render_as_string(hide_password=False))

    # --- writing -----------------------------------------------------------------------------

    def append(
        self,
        run_id: str,
        events: Sequence[Event | NewEvent],
        expected_version: int | None = None,
    ) -> list[int]:
        """Append ``events`` to run ``run_id`` atomically; return their global positions.

        ``expected_version`` is the number of events the caller believes the run has (0 for a new
        run); ``None`` appends at the end whatever the version. Transient database errors are
        retried, which is safe because re-sent event ids are deduplicated.
        """
        return self.append_batch(run_id, events, expected_version).positions

    def append_batch(
        self,
        run_id: str,
        events: Sequence[Event | NewEvent],
        expected_version: int | None = None,
    ) -> AppendResult:
        """Like :meth:`append`, and also tells whether the batch was a re-send (a no-op)."""
        check_run_id(run_id)
        if len(events) < GC_PAUSE_MIN_EVENTS:
            return self._append_batch(run_id, events, expected_version)
        with gc_paused():
            return self._append_batch(run_id, events, expected_version)

    def _append_batch(
        self, run_id: str, events: Sequence[Event | NewEvent], expected_version: int | None
    ) -> AppendResult:
        prepared = prepare_batch(events, self.catalogue, self.max_payload_bytes)
        if not prepared:
            return AppendResult([])
        writer = self._writer
        return self._with_retries(lambda: writer.append_once(run_id, prepared, expected_version))

    def append_new_runs(
        self, runs: Sequence[tuple[str, Sequence[Event | NewEvent]]]
    ) -> list[list[int]]:
        """Store several *new* runs in one transaction (one commit, one fsync); return each
        run's positions.

        All or nothing: if any run already has events, :class:`ConcurrencyError` names it and
        nothing is stored; a clash of event ids raises :class:`IdempotencyError`. Callers that
        may meet re-sends fall back to :meth:`append_batch` per run, which recognises them.
        """
        prepared = []
        for run_id, events in runs:
            check_run_id(run_id)
            prepared.append((run_id, self._prepare(events)))
        if len({run_id for run_id, _ in prepared}) != len(prepared):
            raise InvalidEventError("append_new_runs: a run appears twice in one call")
        prepared = [(run_id, batch) for run_id, batch in prepared if batch]
        if not prepared:
            return [[] for _ in runs]
        return self._with_retries(lambda: self._append_new_runs_once(prepared, len(runs), runs))

    def _append_new_runs_once(
        self,
        prepared: list[tuple[str, list[Prepared]]],
        count: int,
        runs: Sequence[tuple[str, Sequence[Event | NewEvent]]],
    ) -> list[list[int]]:
        try:
            with write_transaction(self.engine) as conn:
                lock_positions(conn)
                run_ids = [run_id for run_id, _ in prepared]
                for chunk in chunks(run_ids, 500):
                    existing = conn.execute(
                        select(events_table.c.run_id)
                        .where(events_table.c.run_id.in_(chunk), events_table.c.seq == 0)
                        .limit(1)
                    ).scalar()
                    if existing is not None:
                        raise ConcurrencyError(existing, 0, self._version(conn, existing))
                position = self._last_position(conn) + 1
                assigned: dict[str, list[int]] = {}
                for run_id, batch in prepared:
                    insert_rows(conn, run_id, 0, position, batch)
                    assigned[run_id] = list(range(position, position + len(batch)))
                    position += len(batch)
        except IntegrityError:
            raise IdempotencyError(
                "some of these events are stored already; append the runs one by one"
            ) from None
        return [assigned.get(run_id, []) for run_id, _ in runs][:count]

    def version(self, run_id: str) -> int:
        """The run's current version: its number of events (0 if it has none)."""
        return self._reading(lambda conn: self._version(conn, run_id))

    def quarantine(self, *, source: str, location: str, reason: str, raw: str) -> int:
        """Keep input that could not be stored, verbatim, with the reason; return its id.

        The same record (source, location and raw content) still waiting in quarantine is kept
        once: re-running an import does not pile up copies; the reason is brought up to date.
        """
        row = {
            "received_at": datetime.now(UTC),
            "source": _storable(source)[:500],
            "location": _storable(location)[:200],
            "reason": _storable(reason),
            "raw": _storable(raw),
        }
        q = quarantine_table.c
        same = select(q.id).where(
            q.source == row["source"],
            q.location == row["location"],
            q.raw == row["raw"],
            q.resolved_at.is_(None),
        )
        try:  # not retried: a re-sent record would be kept twice after an ambiguous commit
            with write_transaction(self.engine) as conn:
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
        except DBAPIError as exc:
            raise explain(self.engine, exc) from (None if classify(exc) != "other" else exc)

    def _prepare(self, events: Sequence[Event | NewEvent]) -> list[Prepared]:
        """Validate, serialize and size-check a batch (see :func:`~.store_append.prepare`)."""
        return prepare(events, self.catalogue, self.max_payload_bytes)

    @staticmethod
    def _lock_positions(conn: Connection) -> None:
        lock_positions(conn)

    @staticmethod
    def _insert(
        conn: Connection, run_id: str, seq: int, position: int, batch: list[Prepared]
    ) -> None:
        """Insert ``batch`` in ``conn``'s transaction (no checks: tests stage half an append)."""
        insert_rows(conn, run_id, seq, position, batch)

    def _with_retries(self, attempt: Callable[[], T]) -> T:
        """``attempt()`` with :func:`~steplog.database.with_retries`' policy (``retries``)."""
        return with_retries(self.engine, attempt, retries=self.retries)

    def _reading(self, read: Callable[[Connection], T]) -> T:
        """``read`` on a fresh connection, retried like appends (reading twice is harmless)."""

        def attempt() -> T:
            with self.engine.connect() as conn:
                return read(conn)

        return self._with_retries(attempt)

    # --- reading -----------------------------------------------------------------------------

    def read_run(self, run_id: str, *, from_seq: int = 0) -> list[StoredEvent]:
        """The run's events from ``from_seq`` on, in order."""
        mark = self._mark
        rows = self._reading(
            lambda conn: self._fetch(
                conn,
                f"{_SELECT} WHERE run_id = {mark} AND seq >= {mark} ORDER BY seq",
                (run_id, from_seq),
            )
        )
        return [self._to_stored(row) for row in rows]

    def read_all(
        self, after_position: int = 0, limit: int | None = None, *, page_size: int = 1000
    ) -> Iterator[StoredEvent]:
        """Every event after ``after_position`` in position order, streamed page by page.

        Memory stays constant however long the log: each page is read in its own short
        transaction, and the next page starts after the last position seen.
        """
        if page_size < 1:
            raise SteplogError(f"page_size must be at least 1, not {page_size}")
        remaining = limit
        cursor = after_position
        while remaining is None or remaining > 0:
            size = page_size if remaining is None else min(page_size, remaining)
            sql = f"{_SELECT} WHERE position > {self._mark} ORDER BY position LIMIT {size:d}"
            rows = self._reading(functools.partial(self._fetch, sql=sql, params=(cursor,)))
            to_stored = self._to_stored
            for row in rows:
                yield to_stored(row)
            if len(rows) < size:
                return
            cursor = rows[-1][0]
            if remaining is not None:
                remaining -= len(rows)

    def page(self, conn: Connection, after_position: int, limit: int) -> list[StoredEvent]:
        """Up to ``limit`` events after ``after_position``, read on ``conn`` (the caller's
        transaction): how projections read and write atomically."""
        rows = self._fetch(
            conn,
            f"{_SELECT} WHERE position > {self._mark} ORDER BY position LIMIT {limit:d}",
            (after_position,),
        )
        to_stored = self._to_stored
        return [to_stored(row) for row in rows]

    def events_before(
        self, conn: Connection, run_ids: Sequence[str], before_position: int
    ) -> list[StoredEvent]:
        """Events of ``run_ids`` older than ``before_position``, by run and seq, on ``conn``."""
        to_stored = self._to_stored
        return [to_stored(row) for row in self.rows_before(conn, run_ids, before_position)]

    def page_rows(self, conn: Connection, after_position: int, limit: int) -> list[RawRow]:
        """:meth:`page` as driver rows: nothing decoded (see :meth:`payload_of`), for folds that
        need the payloads of few events only."""
        return self._fetch(
            conn,
            f"{_SELECT} WHERE position > {self._mark} ORDER BY position LIMIT {limit:d}",
            (after_position,),
        )

    def rows_before(
        self, conn: Connection, run_ids: Sequence[str], before_position: int
    ) -> list[RawRow]:
        """:meth:`events_before` as driver rows."""
        found: list[RawRow] = []
        for chunk in chunks(list(run_ids), 500):
            marks = ", ".join([self._mark] * len(chunk))
            found.extend(
                self._fetch(
                    conn,
                    f"{_SELECT} WHERE run_id IN ({marks}) AND position < {self._mark} "
                    "ORDER BY run_id, seq",
                    (*chunk, before_position),
                )
            )
        return found

    def payload_of(self, type_name: str, version: int, payload: Any) -> JsonDict:
        """A driver row's payload, decoded and upcast to the current version (as in
        :class:`StoredEvent`)."""
        if type(payload) is str:
            payload = from_json(payload)
        if version < self._current_versions.get(type_name, 0):
            version, payload = self.catalogue.upcast(type_name, version, payload)
        return payload  # type: ignore[no-any-return]

    def current_versions(self) -> dict[str, int]:
        """The current schema version of each event type (older payloads are upcast)."""
        return self._current_versions

    def to_stored(self, row: RawRow) -> StoredEvent:
        """A driver row (from :meth:`page_rows`) as a :class:`StoredEvent`."""
        return self._to_stored(row)

    def last_position(self) -> int:
        """The position of the newest event (0 for an empty store)."""
        return self._reading(self._last_position)

    def count_runs(self) -> int:
        """How many distinct runs the log holds."""
        query = select(func.count(func.distinct(events_table.c.run_id)))
        return self._reading(lambda conn: int(conn.execute(query).scalar_one()))

    def quarantined(
        self,
        *,
        after_id: int = 0,
        limit: int = 100,
        source: str | None = None,
        resolved: bool | None = False,
    ) -> list[QuarantinedInput]:
        """Quarantined input, oldest first, optionally from one ``source`` only.

        ``resolved``: False (default) lists records still waiting, True those a retry stored,
        None both.
        """
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
        rows = self._reading(lambda conn: conn.execute(query).all())
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

    def quarantined_input(self, record_id: int) -> QuarantinedInput | None:
        """One quarantined record by id."""
        found = self.quarantined(after_id=record_id - 1, limit=1, resolved=None)
        return found[0] if found and found[0].id == record_id else None

    def count_quarantined(self) -> int:
        """How many records sit in quarantine, not yet resolved by a retry."""
        query = (
            select(func.count())
            .select_from(quarantine_table)
            .where(quarantine_table.c.resolved_at.is_(None))
        )
        return self._reading(lambda conn: int(conn.execute(query).scalar_one()))

    def purge_quarantined(
        self,
        *,
        record_ids: Sequence[int] = (),
        source: str | None = None,
        resolved_only: bool = False,
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
            with write_transaction(self.engine) as conn:
                return int(conn.execute(query).rowcount or 0)
        except DBAPIError as exc:
            raise explain(self.engine, exc) from (None if classify(exc) != "other" else exc)

    @staticmethod
    def _version(conn: Connection, run_id: str) -> int:
        query = select(func.max(events_table.c.seq)).where(events_table.c.run_id == run_id)
        last = conn.execute(query).scalar()
        return 0 if last is None else int(last) + 1

    @staticmethod
    def _last_position(conn: Connection) -> int:
        return int(conn.execute(select(func.max(events_table.c.position))).scalar() or 0)

    @property
    def _mark(self) -> str:
        return "?" if self._sqlite else "%s"

    def _to_stored(self, row: Sequence[Any]) -> StoredEvent:
        """A driver row (``_SELECT``'s columns) as a StoredEvent: the hot path of every reader.

        SQLite hands back text (hex ids, ``YYYY-MM-DD HH:MM:SS.ffffff`` UTC times, JSON);
        PostgreSQL hands back UUIDs, aware datetimes and decoded JSONB.
        """
        position, event_id, run_id, seq, type_name, version, recorded_at, payload = row
        if type(payload) is str:
            payload = from_json(payload)
        if type(recorded_at) is str:
            recorded_at = datetime.fromisoformat(recorded_at + "+00:00")
        elif recorded_at.tzinfo is not UTC:
            recorded_at = utc(recorded_at)
        if version < self._current_versions.get(type_name, 0):
            version, payload = self.catalogue.upcast(type_name, version, payload)
        return StoredEvent(
            position, event_id, run_id, seq, type_name, version, recorded_at, payload
        )

    def _fetch(self, conn: Connection, sql: str, params: Sequence[Any]) -> list[Any]:
        """Rows straight from the driver's cursor (no per-row SQLAlchemy processing); driver
        errors wrapped as SQLAlchemy would (:func:`~steplog.driver.fetch_rows`)."""
        return fetch_rows(conn, sql, params)


def check_run_id(run_id: object) -> None:
    """A run id is a non-empty string of at most 255 characters without control characters."""
    if not isinstance(run_id, str) or not run_id.strip():
        raise InvalidEventError(f"run id must be a non-empty string, not {run_id!r}")
    if len(run_id) > MAX_RUN_ID_LENGTH:
        raise InvalidEventError(
            f"run id {run_id[:40]!r}... is {len(run_id)} characters; the limit is "
            f"{MAX_RUN_ID_LENGTH}"
        )
    if run_id.isprintable():  # no control characters, no lone surrogates: every append's case
        return
    if any(ord(ch) < 32 for ch in run_id):
        raise InvalidEventError(f"run id {run_id!r} contains control characters")
    try:
        run_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidEventError(f"run id {run_id!r} is not valid Unicode text") from None


def _uuid_from_hex(hex_id: str) -> uuid.UUID:
    """``uuid.UUID(hex_id)`` without its string clean-up: readers build one per event.

    The stored form is always 32 lowercase hex digits (written by steplog), so the general
    parser's stripping of braces, dashes and prefixes is pure overhead.
    """
    value = _new_uuid(uuid.UUID)
    object.__setattr__(value, "int", int(hex_id, 16))
    object.__setattr__(value, "is_safe", uuid.SafeUUID.unknown)
    return value


_new_uuid = object.__new__


def _storable(text_value: str) -> str:
    """Text any engine accepts: NULs and lone surrogates escaped, never dropped silently."""
    escaped = text_value.replace("\x00", "\\x00")
    return escaped.encode("utf-8", errors="backslashreplace").decode("utf-8")


_sqlite_datetime = sqlite_datetime  # the name the OTLP pipeline imports
__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MAX_RUN_ID_LENGTH",
    "POSITION_LOCK_SQL",
    "AppendResult",
    "EventStore",
    "NewEvent",
    "QuarantinedInput",
    "StoredEvent",
    "check_run_id",
]
