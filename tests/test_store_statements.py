"""What one append costs the database: statements on SQLite, round trips on PostgreSQL.

Counted, not timed: SQLite's trace callback sees every statement the driver runs; libpq's
protocol trace shows every message PostgreSQL receives (a ``Sync`` ends a round trip, a simple
``Query`` is one too -- a pool's pre-ping is one). The expectations are the write path's design
(module docstring of ``steplog.store_append``): four statements on SQLite, four round trips on
PostgreSQL, and the idempotency look-up only for a re-send.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.dialects.sqlite import DATETIME as SQLiteDateTime
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite as sqlite_dialect

from steplog.errors import ConcurrencyError
from steplog.events import Event, StepStarted
from steplog.store import EventStore, NewEvent
from steplog.store_append import sqlite_datetime, utc


def steps(count: int, start: int = 0) -> list[Event]:
    return [StepStarted(step=f"s{i}", step_index=i) for i in range(start, start + count)]


def _sqlite_statements(store: EventStore) -> list[str]:
    seen: list[str] = []

    @event.listens_for(store.engine, "connect")
    def trace(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.set_trace_callback(seen.append)

    store.engine.dispose()  # new connections, traced from their first statement
    return seen


def _kinds(statements: list[str]) -> list[str]:
    """Each statement's first words, rows of one ``executemany`` counted once."""
    kinds: list[str] = []
    for sql in statements:
        words = " ".join(sql.split()[:3]).upper()
        kind = (
            "INSERT"
            if words.startswith("INSERT")
            else "LOOKUP"
            if "EVENT_ID IN" in sql.upper() or "WHERE EVENTS.EVENT_ID" in sql.upper()
            else words.split()[0]
        )
        if not (kind == "INSERT" and kinds and kinds[-1] == "INSERT"):
            kinds.append(kind)
    return kinds


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Any:
    store = EventStore.open(str(tmp_path / "count.db"))
    store.append("warm", steps(1), 0)  # the pragmas of a fresh connection are not counted below
    yield store
    store.close()


def test_sqlite_append_is_four_statements_at_any_batch_size(sqlite_store: EventStore) -> None:
    seen = _sqlite_statements(sqlite_store)
    sqlite_store.append("warm-2", steps(1), 0)  # opens the traced connection: pragmas
    for batch in (1, 100):
        seen.clear()
        sqlite_store.append(f"run-{batch}", steps(batch), 0)
        assert _kinds(seen) == ["BEGIN", "SELECT", "INSERT", "COMMIT"], seen
        inserts = [sql for sql in seen if sql.lstrip().upper().startswith("INSERT")]
        assert len(inserts) == batch  # one executemany: the statement once per row


def test_sqlite_resend_looks_up_ids_only_after_the_fast_path_stored_nothing(
    sqlite_store: EventStore,
) -> None:
    batch = [NewEvent(e) for e in steps(3)]
    first = sqlite_store.append("r", batch, 0)
    seen = _sqlite_statements(sqlite_store)
    assert sqlite_store.append("r", batch, 0) == first  # a re-send: same positions
    kinds = _kinds(seen)
    assert "LOOKUP" in kinds and "INSERT" not in kinds
    assert kinds.index("LOOKUP") > kinds.index("ROLLBACK")  # after the fast path gave up
    seen.clear()
    with pytest.raises(ConcurrencyError):
        sqlite_store.append("r", steps(1), 0)  # a real conflict: new ids, stale version
    assert "INSERT" not in _kinds(seen)


def test_sqlite_append_sends_only_its_begin_through_sqlalchemy(sqlite_store: EventStore) -> None:
    executed: list[str] = []
    event.listen(sqlite_store.engine, "before_cursor_execute",
                 lambda *args: executed.append(args[2]))  # fmt: skip
    sqlite_store.append("r", steps(10), 0)
    assert executed == ["BEGIN IMMEDIATE"]  # the rest runs on the driver


@pytest.mark.postgres
def test_postgres_append_is_four_round_trips(pg_url: str, tmp_path: Path) -> None:
    store = EventStore.open(pg_url)
    trace_path = tmp_path / "libpq.trace"
    try:
        run = f"r-{uuid.uuid4().hex}"
        store.append(f"warm-{run}", steps(1), 0)
        pool = store.engine
        with pool.connect() as conn:
            pgconn = conn.connection.dbapi_connection.pgconn  # type: ignore[union-attr]
            fd = os.open(trace_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            pgconn.trace(fd)
        store.append(run, steps(100), 0)
        store.append(run, steps(1, start=100), 100)
        with pool.connect() as conn:
            conn.connection.dbapi_connection.pgconn.untrace()  # type: ignore[union-attr]
        os.close(fd)
        sent = [line.split("\t") for line in trace_path.read_text().splitlines()]
        from_client = [fields[3] for fields in sent if len(fields) > 3 and fields[1] == "F"]
        # Per append: the pool's pre-ping (a simple Query), then three Syncs: psycopg's BEGIN,
        # the pipelined lock + insert, the COMMIT.
        round_trips = from_client.count("Sync") + from_client.count("Query")
        assert round_trips == 2 * 4 + 1, from_client  # + the pre-ping of the untrace checkout
        assert [e.seq for e in store.read_run(run)] == list(range(101))
    finally:
        store.close()


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 12, 1, 6, 30, 0),  # naive: UTC
        datetime(2026, 12, 1, 6, 30, 0, 7, tzinfo=UTC),
        datetime(2026, 6, 30, 23, 59, 59, 999_999, tzinfo=timezone(timedelta(hours=-5))),
        datetime(1999, 12, 31, 23, 0, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    ],
)
def test_sqlite_time_text_is_the_format_sqlalchemy_reads(moment: datetime) -> None:
    """Appends and OTLP rounds both write SQLite times through ``sqlite_datetime`` (isoformat
    for speed); it must be SQLAlchemy's ``YYYY-MM-DD HH:MM:SS.ffffff`` of the UTC moment."""
    expected = utc(moment).strftime("%Y-%m-%d %H:%M:%S.%f")
    assert sqlite_datetime(moment) == expected
    assert SQLiteDateTime().result_processor(sqlite_dialect(), None)(expected) == utc(
        moment
    ).replace(tzinfo=None)
