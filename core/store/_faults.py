"""Database failures: what kind a driver error is, the one-line message that says what to do,
and retries of transient ones with backoff.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

if TYPE_CHECKING:  # alembic costs ~0.7 s to import: only commands that migrate pay for it
    pass

from ..errors import (
    DatabaseError,
    DatabaseFullError,
    DatabaseLockedError,
    DatabaseReadOnlyError,
    DatabaseUnavailableError,
)
from ._engine import describe, is_sqlite, sqlite_busy_timeout, sqlite_file

T = TypeVar("T")


@contextmanager
def connect_or_explain(engine: Engine) -> Iterator[Connection]:
    """``engine.connect()`` that turns connection failures into a clear :class:`DatabaseError`."""
    try:
        conn = engine.connect()
    except OperationalError as exc:
        if classify(exc) in ("busy", "full", "read_only", "corrupt"):
            raise explain(engine, exc) from None
        raise DatabaseError(f"cannot open {describe(engine)}: {_first_line(exc.orig)}") from None
    with conn:
        yield conn


Fault = Literal["transient", "busy", "full", "read_only", "cannot_open", "corrupt", "other"]
"""What kind of failure a driver error is: only ``transient`` and ``busy`` are worth a retry."""

_SQLITE_FAULTS: tuple[tuple[str, Fault], ...] = (
    ("SQLITE_BUSY", "busy"),  # another connection holds the lock (after the busy timeout)
    ("SQLITE_LOCKED", "busy"),
    ("SQLITE_PROTOCOL", "busy"),  # a WAL lock race; SQLite itself says: retry
    ("SQLITE_FULL", "full"),
    ("SQLITE_READONLY", "read_only"),
    ("SQLITE_PERM", "read_only"),
    ("SQLITE_CANTOPEN", "cannot_open"),
    ("SQLITE_CORRUPT", "corrupt"),
    ("SQLITE_NOTADB", "corrupt"),
)
_PG_TRANSIENT_STATES = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available
        "53300",  # too_many_connections
        "57P01",  # admin_shutdown (pg_terminate_backend, smart/fast shutdown)
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now (starting up, in recovery)
    }
)


def classify(exc: DBAPIError) -> Fault:
    """The kind of a database failure, from the driver's error code (never from its wording)."""
    if exc.connection_invalidated:
        return "transient"  # the connection is gone; SQLAlchemy has discarded it
    orig = exc.orig
    name = getattr(orig, "sqlite_errorname", None)
    if isinstance(name, str):
        return next((fault for prefix, fault in _SQLITE_FAULTS if name.startswith(prefix)), "other")
    state = getattr(orig, "sqlstate", None)
    if state == "53100":  # disk_full
        return "full"
    if state == "25006":  # read_only_sql_transaction: a hot standby, or a read-only session
        return "read_only"
    if isinstance(state, str) and (state in _PG_TRANSIENT_STATES or state.startswith("08")):
        return "transient"
    if state is None and isinstance(exc, OperationalError) and not isinstance(orig, sqlite3.Error):
        return "transient"  # psycopg: no server answer at all (refused, reset, timed out)
    return "other"


def explain(
    engine: Engine | None, exc: DBAPIError, *, attempts: int = 1, waited: float = 0.0
) -> DatabaseError:
    """The :class:`DatabaseError` a user sees for ``exc``: what failed, where, and what to do.

    Without ``engine`` (code that only has the exception, like the CLI's last-resort handler)
    the database is not named.
    """
    url = engine.url if engine is not None else None
    where = describe(engine) if engine is not None else "the database"
    reason = _first_line(exc.orig)
    fault = classify(exc)
    tried = f"{attempts} attempts over {waited:.1f} s" if attempts > 1 else "1 attempt"
    sqlite = url.get_backend_name() == "sqlite" if url else isinstance(exc.orig, sqlite3.Error)
    if fault == "busy":
        timeout = f"busy timeout {sqlite_busy_timeout(url):g} s; " if url else ""
        return DatabaseLockedError(
            f"{where} is locked: another connection holds its write lock ({timeout}{tried}). "
            "Finish or stop whatever holds it (a long transaction, an open sqlite3 shell), or "
            "wait longer with ?timeout=SECONDS in the database URL"
        )
    if fault == "transient":
        return DatabaseUnavailableError(
            f"{where} kept failing ({tried}): {reason}. Check that the server is up and "
            "reachable, then retry: re-sending the same events is safe, they are deduplicated "
            "by event id"
        )
    if fault == "full":
        return DatabaseFullError(
            f"{where} is full ({reason}): the write was not stored. Free disk space (or raise "
            "the database's size limit) and retry"
        )
    if fault == "read_only":
        if not sqlite:
            return DatabaseReadOnlyError(
                f"{where} is read-only ({reason}): connect to the primary server to write"
            )
        if url is not None and url.query.get("mode") == "ro":
            return DatabaseReadOnlyError(
                f"{where} is read-only ({reason}): its URL opens it with mode=ro; drop that to "
                "write to it"
            )
        folder, name = "", "FILE"
        if url is not None:
            file = Path(sqlite_file(url))
            folder, name = f" {file.parent}", file.name
        return DatabaseReadOnlyError(
            f"{where} is read-only ({reason}): steplog needs write access to the file and to "
            f"its folder{folder} (SQLite creates {name}-wal and {name}-shm there); fix the "
            "permissions"
        )
    if fault == "cannot_open":
        return DatabaseError(
            f"cannot open {where} ({reason}): check that the file and its folder exist and "
            "that steplog may read and write them"
        )
    if fault == "corrupt":
        return DatabaseError(
            f"{where} is damaged or not a steplog database ({reason}); restore it from a "
            "backup (sqlite3's .recover command may salvage its events)"
        )
    return DatabaseError(f"{where} failed: {reason}")


def with_retries(engine: Engine, attempt: Callable[[], T], *, retries: int = 5) -> T:
    """``attempt()``, retried with backoff on transient failures; a clear error otherwise.

    ``attempt`` must be safe to repeat -- its own transaction, and writes that are idempotent
    (the event store's appends are: re-sent event ids are recognised) -- because a failure at
    COMMIT leaves it unknown whether the commit went through.

    Dropped connections and servers restarting are retried up to ``retries`` times (the engine
    reconnects: PostgreSQL pools pre-ping and are invalidated on disconnect); the first retry
    after a dropped connection is immediate, the next ones back off from 50 ms, doubling up to
    2 s, with jitter. A SQLite lock is already waited for by the busy timeout, so it is retried
    only while the time spent stays under that timeout (an immediate ``SQLITE_BUSY`` -- a WAL
    snapshot or recovery race -- is retried; a lock held past the timeout is reported).
    Anything else (a full disk, a read-only file) is reported at once, as a
    :class:`DatabaseError` that says what to do. Integrity errors propagate unchanged: they are
    answers, not failures.
    """
    delay = 0.05
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt()
        except IntegrityError:
            raise
        except DBAPIError as exc:
            fault = classify(exc)
            waited = time.monotonic() - started
            retry = attempts <= retries and (
                fault == "transient"
                or (
                    fault == "busy"
                    and is_sqlite(engine)
                    and waited < sqlite_busy_timeout(engine.url)
                )
            )
            if not retry:
                error = explain(engine, exc, attempts=attempts, waited=waited)
                raise error from (exc if fault == "other" else None)
            if attempts == 1 and exc.connection_invalidated:
                continue  # one dropped connection: the pool has a fresh one, retry now
        time.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, 2.0)


def _first_line(exc: BaseException | None) -> str:
    text = str(exc) if exc is not None else "unknown error"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
