"""Whether the receiver can do its job, truthfully: ``/health`` and ``steplog status``.

Not ready (HTTP 503, the reason in ``"status"`` and ``"reasons"``) when

* the database cannot be read (PostgreSQL down, a SQLite file gone);
* writes fail: the last attempt to stage spans failed (disk full, read-only database, lost
  server) and nothing has been staged since (forgotten after :data:`FAILURE_MEMORY` seconds
  without writes, so a receiver nobody sends to is not kept out of a load balancer for ever);
* the database is read-only (a PostgreSQL standby or read-only session; a SQLite file or
  folder without write permission) -- probed without writing;
* SQLite's write lock has been held by someone else for more than :data:`LOCK_SECONDS`;
* an assembler failed :data:`ASSEMBLER_FAILURES` rounds in a row, or died.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ...errors import SteplogError
from ...store import EventStore, connect_or_explain, is_sqlite

FAILURE_MEMORY = 60.0
LOCK_SECONDS = 10.0
ASSEMBLER_FAILURES = 3
PROBE_SECONDS = 1.0
"""A probe's answer is reused for this long (``/health`` may be polled often)."""
PROBE_BUSY_MS = 100


@dataclass(slots=True)
class _Outcome:
    ok: bool = True
    reason: str = ""
    at: float = 0.0


class WriteWatch:
    """The last outcome of each kind of write (``"staging"``...), thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: dict[str, _Outcome] = {}

    def succeeded(self, what: str) -> None:
        with self._lock:
            self._outcomes[what] = _Outcome(True, "", time.monotonic())

    def failed(self, what: str, reason: str) -> None:
        with self._lock:
            self._outcomes[what] = _Outcome(False, reason, time.monotonic())

    def problems(self) -> list[str]:
        """The writes whose last attempt (within :data:`FAILURE_MEMORY`) failed, and why."""
        now = time.monotonic()
        with self._lock:
            return [
                f"{what} fails: {outcome.reason}"
                for what, outcome in sorted(self._outcomes.items())
                if not outcome.ok and now - outcome.at < FAILURE_MEMORY
            ]


class WriteProbe:
    """Can this store be written? Probed without writing: SQLite takes and releases its write
    lock (``BEGIN IMMEDIATE``, waiting at most 0.1 s) around a write that changes nothing;
    PostgreSQL is asked whether the session
    is read-only. Answers are cached for :data:`PROBE_SECONDS`."""

    def __init__(self, store: EventStore, *, lock_seconds: float = LOCK_SECONDS) -> None:
        self.store = store
        self.lock_seconds = lock_seconds
        self._sqlite: bool | None = None
        self._locked_since: float | None = None
        self._checked_at = -PROBE_SECONDS
        self._answer: str | None = None
        self._lock = threading.Lock()

    def problem(self) -> str | None:
        """Why the store cannot be written now (``None``: it can, as far as a probe can tell)."""
        now = time.monotonic()
        if now - self._checked_at >= PROBE_SECONDS and self._lock.acquire(blocking=False):
            try:
                self._answer = self._probe(now)
                self._checked_at = now
            finally:
                self._lock.release()
        return self._answer

    def _probe(self, now: float) -> str | None:
        if self._sqlite is None:
            self._sqlite = is_sqlite(self.store.engine)
        try:
            fault = self._sqlite_fault() if self._sqlite else self._postgres_fault()
        except (SteplogError, SQLAlchemyError) as exc:
            return f"the database cannot be reached: {_first_line(exc)}"
        if fault != "locked":
            self._locked_since = None
            return fault
        if self._locked_since is None:
            self._locked_since = now
        held = now - self._locked_since
        if held < self.lock_seconds:
            return None
        return (
            f"the SQLite write lock has been held by another connection for {held:.0f} s "
            f"(more than {self.lock_seconds:g} s): nothing can be written"
        )

    def _sqlite_fault(self) -> str | None:
        raw = self.store.engine.raw_connection()
        try:
            cursor = raw.cursor()
            (previous,) = cursor.execute("PRAGMA busy_timeout").fetchone()
            cursor.execute(f"PRAGMA busy_timeout = {PROBE_BUSY_MS}")
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:  # a write that changes nothing: refused on a read-only file or connection
                    cursor.execute("DELETE FROM otlp_spans WHERE 0")
                finally:
                    cursor.execute("ROLLBACK")
            except sqlite3.Error as exc:
                name = getattr(exc, "sqlite_errorname", "")
                if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                    return "locked"
                if name.startswith(("SQLITE_READONLY", "SQLITE_PERM", "SQLITE_CANTOPEN")):
                    return f"the database is read-only: {exc}"
                return f"the database cannot be written: {exc}"
            finally:
                cursor.execute(f"PRAGMA busy_timeout = {int(previous)}")
        except sqlite3.Error as exc:
            return f"the database cannot be written: {exc}"
        finally:
            raw.close()
        return None

    def _postgres_fault(self) -> str | None:
        with connect_or_explain(self.store.engine) as conn:
            standby, read_only = conn.execute(
                text("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
            ).one()
            conn.rollback()
        if standby:
            return "the database is a read-only standby (in recovery): connect to the primary"
        if read_only == "on":
            return "the database session is read-only (default_transaction_read_only)"
        return None


def assembler_problem(failures: int, error: str | None) -> str | None:
    """Why an assembler that failed ``failures`` rounds in a row makes the receiver not ready."""
    if failures < ASSEMBLER_FAILURES:
        return None
    return f"the assembler failed {failures} rounds in a row: {error or 'see its log'}"


def summarise(report: dict[str, Any], reasons: list[str]) -> bool:
    """Put ``reasons`` into ``report`` (``status`` is the first, or ``"ok"``); whether ready."""
    if reasons:
        report["status"] = reasons[0]
        report["reasons"] = reasons
    else:
        report["status"] = "ok"
    return not reasons


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, DBAPIError):
        exc = exc.orig or exc
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
