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

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import IntegrityError

from ..errors import (
    ConcurrencyError,
    ConfigurationError,
    IdempotencyError,
    InvalidEventError,
    SchemaNotCurrentError,
)
from ..models import events_table
from . import _quarantine, _read
from ._append import (
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
)
from ._driver import fetch_rows
from ._engine import (
    create_engine_for,
    is_sqlite,
    redact,
    resolve_url,
    sqlite_busy_timeout,
    sqlite_path,
    without_create,
    write_transaction,
)
from ._event import RawRow as RawRow
from ._event import RowDecoder, StoredEvent
from ._event import recorded_at_of as recorded_at_of
from ._faults import with_retries
from ._migrations import ensure_schema
from ._prepare import MAX_RUN_ID_LENGTH, PreparedBatch, check_run_id
from ._quarantine import QuarantinedInput

if TYPE_CHECKING:  # the event models (pydantic) load on first use: reading needs none of them
    from ..events import Catalogue, Event

DEFAULT_MAX_PAYLOAD_BYTES: Final = 1024 * 1024
T = TypeVar("T")


class EventStore(RowDecoder):
    """Append-only event log; see the module docstring for the contract.

    The facade: it holds the engine and the retry policy, and its methods delegate, once per
    call, to the write path (:mod:`._append`), the queries (:mod:`._read`) and
    quarantine (:mod:`._quarantine`). Decoding rows, once per event, is inherited
    (:class:`~steplog.store._event.RowDecoder`, which also holds the catalogue).
    """

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

    @classmethod
    def open_existing(cls, db: str | None = None, **kwargs: Any) -> EventStore:
        """Open a store that already exists at the current schema; create and migrate nothing.

        For viewers such as ``steplog ui``, which must not make a database they were pointed at
        by mistake: a missing SQLite file is refused (:class:`ConfigurationError`), a database
        without steplog's schema or at an older revision too (:class:`SchemaNotCurrentError`,
        naming ``steplog db upgrade``). SQLite files are opened read-write without create, so a
        file removed while the store is open is never re-created by the next connection.
        """
        url = resolve_url(db)
        path = sqlite_path(url)
        if path is not None and not path.exists():
            raise ConfigurationError(f"there is no steplog database at {path}")
        engine = create_engine_for(without_create(url))
        try:
            ensure_schema(engine, auto_migrate=False)
        except SchemaNotCurrentError as exc:  # name the database as the user wrote it
            engine.dispose()
            shown = redact(engine.url.render_as_string(hide_password=False))
            raise SchemaNotCurrentError(str(exc).replace(shown, redact(url))) from None
        except BaseException:
            engine.dispose()
            raise
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
        return _quarantine.quarantine(
            self.engine, source=source, location=location, reason=reason, raw=raw
        )

    def _prepare(self, events: Sequence[Event | NewEvent]) -> list[Prepared]:
        """Validate, serialize and size-check a batch (see :func:`~._append.prepare`)."""
        return prepare(events, self.catalogue, self.max_payload_bytes)

    def _prepare_batch(self, events: Sequence[Event | NewEvent]) -> PreparedBatch:
        """:meth:`_prepare`, column by column (:func:`~._prepare.prepare_batch`): the form an
        assembly round queues (:class:`~._prepare.RoundRows`), no record per event."""
        return prepare_batch(events, self.catalogue, self.max_payload_bytes)

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
        """``attempt()`` with :func:`~steplog.store.with_retries`' policy (``retries``)."""
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
        return _read.read_run(self, run_id, from_seq)

    def read_all(
        self, after_position: int = 0, limit: int | None = None, *, page_size: int = 1000
    ) -> Iterator[StoredEvent]:
        """Every event after ``after_position`` in position order, streamed page by page.

        Memory stays constant however long the log: each page is read in its own short
        transaction, and the next page starts after the last position seen.
        """
        return _read.read_all(self, after_position, limit, page_size)

    def page(self, conn: Connection, after_position: int, limit: int) -> list[StoredEvent]:
        """Up to ``limit`` events after ``after_position``, read on ``conn`` (the caller's
        transaction): how projections read and write atomically."""
        return _read.page(self, conn, after_position, limit)

    def events_before(
        self, conn: Connection, run_ids: Sequence[str], before_position: int
    ) -> list[StoredEvent]:
        """Events of ``run_ids`` older than ``before_position``, by run and seq, on ``conn``."""
        return _read.events_before(self, conn, run_ids, before_position)

    def page_rows(self, conn: Connection, after_position: int, limit: int) -> list[RawRow]:
        """:meth:`page` as driver rows: nothing decoded (see :meth:`payload_of`), for folds that
        need the payloads of few events only."""
        return _read.page_rows(self, conn, after_position, limit)

    def rows_before(
        self, conn: Connection, run_ids: Sequence[str], before_position: int
    ) -> list[RawRow]:
        """:meth:`events_before` as driver rows."""
        return _read.rows_before(self, conn, run_ids, before_position)

    def last_position(self) -> int:
        """The position of the newest event (0 for an empty store)."""
        return self._reading(self._last_position)

    def count_runs(self) -> int:
        """How many distinct runs the log holds."""
        return _read.count_runs(self)

    # --- quarantine --------------------------------------------------------------------------

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
        return _quarantine.quarantined(
            self, after_id=after_id, limit=limit, source=source, resolved=resolved
        )

    def quarantined_input(self, record_id: int) -> QuarantinedInput | None:
        """One quarantined record by id."""
        found = self.quarantined(after_id=record_id - 1, limit=1, resolved=None)
        return found[0] if found and found[0].id == record_id else None

    def count_quarantined(self) -> int:
        """How many records sit in quarantine, not yet resolved by a retry."""
        return _quarantine.count_quarantined(self)

    def purge_quarantined(
        self,
        *,
        record_ids: Sequence[int] = (),
        source: str | None = None,
        resolved_only: bool = False,
    ) -> int:
        """Delete quarantine records (never events): the given ids, or every record from
        ``source``, or every one; ``resolved_only`` keeps those still waiting. Returns how many."""
        return _quarantine.purge_quarantined(
            self.engine, record_ids=record_ids, source=source, resolved_only=resolved_only
        )

    # --- the readers' building blocks (other modules stage and read with these) --------------

    _version = staticmethod(_read.run_version)
    _last_position = staticmethod(_read.last_position)

    @property
    def _mark(self) -> str:
        return "?" if self._sqlite else "%s"

    def _fetch(self, conn: Connection, sql: str, params: Sequence[Any]) -> list[Any]:
        """Rows straight from the driver's cursor (no per-row SQLAlchemy processing); driver
        errors wrapped as SQLAlchemy would (:func:`~steplog.store._driver.fetch_rows`)."""
        return fetch_rows(conn, sql, params)


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
