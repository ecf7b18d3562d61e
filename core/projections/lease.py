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

import secrets
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Protocol

from sqlalchemy import Connection, Engine, delete, insert, select, text

from ..errors import SteplogError
from ..models import checkpoints_table
from ..store import sqlite_path, write_transaction

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


@dataclass(frozen=True)
class RebuildLease:
    """The lease of projection ``name``'s rebuild: a checkpoint row ``<name>:rebuild`` whose
    position is the owning rebuild's token, renewed every page, plus its holder lock."""

    name: str
    seconds: int
    """A lease silent this long is taken over even when its holder lock cannot tell."""
    _holders: dict[int, HolderLock] = field(default_factory=dict, compare=False)

    @property
    def row(self) -> str:
        return f"{self.name}:rebuild"

    def acquire(self, engine: Engine) -> int:
        """Take the rebuild lease; returns its token (see :meth:`renew`).

        The lease row names the rebuild that owns the shadow tables; the holder lock tells
        whether the process that wrote it is alive. A row whose holder died (SIGKILL, OOM) is
        taken over at once; one whose holder cannot be checked, only after ``seconds``
        without renewal.
        """
        name, lease, seconds = self.name, self.row, self.seconds
        holder = take_holder_lock(engine, f"{name}-rebuild", checkpoints_table.name)
        token = secrets.randbits(62)
        now = datetime.now(UTC)
        try:
            with write_transaction(engine) as conn:
                held = conn.execute(
                    select(checkpoints_table.c.updated_at).where(checkpoints_table.c.name == lease)
                ).scalar()
                stale = held is not None and (now - _utc(held)).total_seconds() >= seconds
                if holder is None and not stale:  # its holder is alive (and not silent too long)
                    since = "" if held is None else f" (active at {_utc(held):%H:%M:%S} UTC)"
                    raise SteplogError(
                        f"another rebuild of {name!r} is running{since}; wait for it to finish"
                    )
                if holder is UNSUPPORTED and held is not None and not stale:
                    raise SteplogError(
                        f"another rebuild of {name!r} is running (active at "
                        f"{_utc(held):%H:%M:%S} UTC); wait for it, or {seconds} s if its "
                        "process died"
                    )
                # Otherwise any row left is an orphan: its holder died, or went silent.
                conn.execute(delete(checkpoints_table).where(checkpoints_table.c.name == lease))
                conn.execute(
                    insert(checkpoints_table).values(name=lease, position=token, updated_at=now)
                )
        except BaseException:
            if holder is not None:
                holder.release()
            raise
        if holder is not None:
            self._holders[token] = holder
        return token

    def renew(self, conn: Connection, token: int) -> None:
        """Renew the lease in ``conn``'s transaction; a lease taken over stops the rebuild."""
        result = conn.execute(
            checkpoints_table.update()
            .where(checkpoints_table.c.name == self.row, checkpoints_table.c.position == token)
            .values(updated_at=datetime.now(UTC))
        )
        if result.rowcount != 1:
            raise SteplogError(
                "this rebuild lost its lease to another rebuild and stopped; nothing was swapped"
            )

    def release(self, conn: Connection, token: int) -> None:
        """Delete the lease row in ``conn``'s transaction and drop the holder lock."""
        conn.execute(
            delete(checkpoints_table).where(
                checkpoints_table.c.name == self.row, checkpoints_table.c.position == token
            )
        )
        # Dropping the holder lock before the delete commits is harmless: a rebuild that takes
        # it meanwhile waits for this transaction (SQLite's write lock, PostgreSQL's row lock)
        # and at worst takes over a lease that is being released anyway.
        self.release_holder(token)

    def release_holder(self, token: int) -> None:
        """Drop the holder lock of the lease ``token`` (if this process holds it)."""
        holder = self._holders.pop(token, None)
        if holder is not None:
            holder.release()


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
