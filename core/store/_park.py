"""Driver connections an appender keeps between appends, so an append skips the pool.

A pool checkout costs an append more than its ``INSERT`` on SQLite (the pool's bookkeeping,
its reset on return), and on PostgreSQL a pre-ping is one more round trip. A connection that
ends an append cleanly (committed, no transaction open) is parked here, still checked out,
and the next append on any thread takes it back; one that failed goes back to its pool.
Parked connections belong to one pool: when that pool is replaced (``Engine.dispose``, or a
dead connection), they are returned to it rather than reused. Only :class:`QueuePool` pools
park (a file database, a server): ``:memory:`` SQLite keeps one connection per thread, and
``NullPool`` means "a new connection each time".
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Final

from sqlalchemy.pool import Pool, QueuePool

PARK_MAX: Final = 4
"""At most this many idle connections parked (concurrent appenders beyond it use the pool)."""


class ConnectionPark:
    """Idle checked-out connections of the pool ``pool()`` returns (see the module docstring)."""

    def __init__(self, pool: Callable[[], Pool]) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._idle: list[tuple[Pool, Any]] = []
        # A park dropped without clear() (a store never closed) returns its connections to
        # their pools, rather than leave them to the collector, which SQLAlchemy reports.
        weakref.finalize(self, _close_all, self._idle)

    def take(self) -> tuple[Pool, Any]:
        """A connection (a pool's proxied connection) and the pool it came from."""
        pool = self._pool()
        parked: Any = None
        stale: list[Any] = []
        with self._lock:
            while self._idle and parked is None:
                owner, pooled = self._idle.pop()
                if owner is pool:
                    parked = pooled
                else:
                    stale.append(pooled)
        for old in stale:
            old.close()
        return pool, pool.connect() if parked is None else parked

    def give_back(self, pool: Pool, pooled: Any) -> None:
        """Park ``pooled`` (taken from ``pool``) if its pool is still current and there is room;
        otherwise return it to its pool."""
        if isinstance(pool, QueuePool) and pool is self._pool():
            with self._lock:
                if len(self._idle) < PARK_MAX:
                    self._idle.append((pool, pooled))
                    return
        pooled.close()

    def clear(self) -> None:
        """Return every parked connection to its pool (a store closing, a dead connection)."""
        with self._lock:
            idle = self._idle[:]
            self._idle.clear()
        _close_all(idle)


def _close_all(idle: list[tuple[Pool, Any]]) -> None:
    for _, pooled in idle:
        pooled.close()
