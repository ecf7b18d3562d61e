"""Liveness of a rebuild: a lock that lives exactly as long as the process holding it.

A rebuild's lease row says *which* rebuild owns the shadow tables; it cannot say whether that
rebuild's process is still alive. A process killed with SIGKILL (or by the OOM killer) leaves
its row behind, and a row alone can only be judged stale by its age. So a rebuild also holds a
*holder lock* that the operating system or the database server drops the moment the process
dies:

* SQLite: ``flock`` on a companion file ``<database>-<name>.lock`` next to the database (never
  on the database file itself: closing another descriptor of that file would drop SQLite's own
  POSIX locks). ``flock`` locks belong to an open file description, so two rebuilds in one
  process exclude each other too.
* PostgreSQL: a session-level advisory lock on a connection kept open for the rebuild; the
  server releases it when the session ends, however it ends.

A rebuild that gets the holder lock knows any lease row it finds is an orphan and takes it over
at once. Where neither mechanism applies (an in-memory SQLite database, Windows), or when a
holder is alive but silent (hung, or on a half-open connection), the lease's age decides.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, Protocol

from sqlalchemy import Connection, Engine, text

from ..store import sqlite_path

if sys.platform != "win32":
    import fcntl

HOLDER_KEY_TAG = 0x57E9107
"""High half of the PostgreSQL advisory-lock key (the low half is the checkpoint table's OID,
so stores in different schemas never exclude each other)."""


class HolderLock(Protocol):
    """A held lock; :meth:`release` is idempotent."""

    def release(self) -> None: ...


class _FileLock:
    def __init__(self, handle: IO[bytes]) -> None:
        self._handle: IO[bytes] | None = handle

    def release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()  # closing the descriptor drops the flock


class _AdvisoryLock:
    def __init__(self, conn: Connection, key_sql: str) -> None:
        self._conn: Connection | None = conn
        self._key_sql = key_sql

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute(text(f"SELECT pg_advisory_unlock({self._key_sql})"))
            conn.commit()
        except Exception:
            conn.invalidate()  # never hand a connection still holding the lock back to the pool
        finally:
            conn.close()


class _Unsupported:
    def release(self) -> None:
        return None


UNSUPPORTED: HolderLock = _Unsupported()
"""Returned where liveness cannot be checked: the lease's age alone decides."""


def take_holder_lock(engine: Engine, name: str, table: str) -> HolderLock | None:
    """Take the holder lock ``name`` without waiting: ``None`` if a live process holds it,
    :data:`UNSUPPORTED` if this database offers no such lock. On PostgreSQL the key is derived
    from ``table`` (whose OID differs between schemas) rather than from ``name``."""
    if engine.dialect.name == "postgresql":
        return _advisory(engine, table)
    path = sqlite_path(engine.url.render_as_string(hide_password=False))
    if path is None or sys.platform == "win32":
        return UNSUPPORTED
    return _flock(path.with_name(f"{path.name}-{name}.lock"))


def _flock(path: Path) -> HolderLock | None:
    if sys.platform == "win32":  # pragma: no cover - for the type checker
        return UNSUPPORTED
    try:
        handle = path.open("ab")
    except OSError:  # a read-only folder, say: fall back on the lease's age
        return UNSUPPORTED
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    except OSError:  # a file system without flock: fall back on the lease's age
        handle.close()
        return UNSUPPORTED
    return _FileLock(handle)  # not inherited by programs this process starts (PEP 446)


def _advisory(engine: Engine, table: str) -> HolderLock | None:
    key_sql = f"(x'{HOLDER_KEY_TAG:X}'::bigint << 32) | '{table}'::regclass::oid::bigint"
    conn = engine.connect()
    try:
        got = conn.execute(text(f"SELECT pg_try_advisory_lock({key_sql})")).scalar()
        conn.commit()  # the lock is the session's; no transaction stays open with it
    except BaseException:
        conn.invalidate()
        conn.close()
        raise
    if not got:
        conn.close()
        return None
    return _AdvisoryLock(conn, key_sql)
