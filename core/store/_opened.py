"""``opened(db)``: the store a public call works on, given as a URL, a path or an open store."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ._event_store import EventStore

StoreLike = EventStore | str | None
"""An open :class:`EventStore` (used as is, left open), a database URL or SQLite path (opened
and closed around the call; it must exist), or None for the default store."""


@contextmanager
def opened(db: StoreLike = None) -> Iterator[EventStore]:
    """The store ``db`` names; one this call opened is closed afterwards. A named SQLite path
    that does not exist is refused (a read never creates a database file)."""
    if isinstance(db, EventStore):
        yield db
        return
    store = EventStore.open(db, must_exist=db is not None)
    try:
        yield store
    finally:
        store.close()
