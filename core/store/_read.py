"""The event store's queries: a run's events, the log page by page, versions and counts.

Each takes the :class:`Reader` it reads for (the :class:`~steplog.store.EventStore`), and
reads through it: rows come
from its ``_fetch`` (straight from the driver's cursor), become events through its
``_to_stored``, and a read of its own runs on a fresh connection, retried (``_reading``). The
store's methods of the same names delegate here, once per call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Protocol, TypeVar

from sqlalchemy import Connection, func, select

from ..errors import SteplogError
from ..models import events_table
from ._append import chunks
from ._event import RawRow, StoredEvent

T = TypeVar("T")


class Reader(Protocol):
    """What the queries need of the store they read for (an EventStore, which delegates here):
    its parameter mark, a retried read on a fresh connection, driver rows and their decoding."""

    @property
    def _mark(self) -> str: ...

    def _reading(self, read: Callable[[Connection], T]) -> T: ...

    def _fetch(self, conn: Connection, sql: str, params: Sequence[Any]) -> list[Any]: ...

    def _to_stored(self, row: Sequence[Any]) -> StoredEvent: ...

    def rows_before(
        self, conn: Connection, run_ids: Sequence[str], before_position: int
    ) -> list[RawRow]: ...


SELECT: Final = (
    "SELECT position, event_id, run_id, seq, type, schema_version, recorded_at, payload FROM events"
)
"""The columns of a :class:`~steplog.store._event.RawRow`, from the event log."""


def read_run(store: Reader, run_id: str, from_seq: int) -> list[StoredEvent]:
    """The run's events from ``from_seq`` on, in order."""
    mark = store._mark
    rows = store._reading(
        lambda conn: store._fetch(
            conn,
            f"{SELECT} WHERE run_id = {mark} AND seq >= {mark} ORDER BY seq",
            (run_id, from_seq),
        )
    )
    return [store._to_stored(row) for row in rows]


def read_all(
    store: Reader, after_position: int, limit: int | None, page_size: int
) -> Iterator[StoredEvent]:
    """Every event after ``after_position`` in position order, a page per short read."""
    if page_size < 1:
        raise SteplogError(f"page_size must be at least 1, not {page_size}")
    remaining = limit
    cursor = after_position
    while remaining is None or remaining > 0:
        size = page_size if remaining is None else min(page_size, remaining)
        sql = f"{SELECT} WHERE position > {store._mark} ORDER BY position LIMIT {size:d}"
        rows = store._reading(functools.partial(store._fetch, sql=sql, params=(cursor,)))
        to_stored = store._to_stored
        for row in rows:
            yield to_stored(row)
        if len(rows) < size:
            return
        cursor = rows[-1][0]
        if remaining is not None:
            remaining -= len(rows)


def page(store: Reader, conn: Connection, after_position: int, limit: int) -> list[StoredEvent]:
    """Up to ``limit`` events after ``after_position``, read on ``conn``."""
    rows = store._fetch(
        conn,
        f"{SELECT} WHERE position > {store._mark} ORDER BY position LIMIT {limit:d}",
        (after_position,),
    )
    to_stored = store._to_stored
    return [to_stored(row) for row in rows]


def page_rows(store: Reader, conn: Connection, after_position: int, limit: int) -> list[RawRow]:
    """:func:`page` as driver rows: nothing decoded."""
    return store._fetch(
        conn,
        f"{SELECT} WHERE position > {store._mark} ORDER BY position LIMIT {limit:d}",
        (after_position,),
    )


def events_before(
    store: Reader, conn: Connection, run_ids: Sequence[str], before_position: int
) -> list[StoredEvent]:
    """Events of ``run_ids`` older than ``before_position``, by run and seq, on ``conn``."""
    to_stored = store._to_stored
    return [to_stored(row) for row in store.rows_before(conn, run_ids, before_position)]


def rows_before(
    store: Reader, conn: Connection, run_ids: Sequence[str], before_position: int
) -> list[RawRow]:
    """:func:`events_before` as driver rows."""
    found: list[RawRow] = []
    for chunk in chunks(list(run_ids), 500):
        marks = ", ".join([store._mark] * len(chunk))
        found.extend(
            store._fetch(
                conn,
                f"{SELECT} WHERE run_id IN ({marks}) AND position < {store._mark} "
                "ORDER BY run_id, seq",
                (*chunk, before_position),
            )
        )
    return found


def count_runs(store: Reader) -> int:
    """How many distinct runs the log holds."""
    query = select(func.count(func.distinct(events_table.c.run_id)))
    return store._reading(lambda conn: int(conn.execute(query).scalar_one()))


def run_version(conn: Connection, run_id: str) -> int:
    """The run's version on ``conn``: its number of events (0 if it has none)."""
    query = select(func.max(events_table.c.seq)).where(events_table.c.run_id == run_id)
    last = conn.execute(query).scalar()
    return 0 if last is None else int(last) + 1


def last_position(conn: Connection) -> int:
    """The position of the newest event on ``conn`` (0 for an empty log)."""
    return int(conn.execute(select(func.max(events_table.c.position))).scalar() or 0)
