"""What one append costs the database: statements on SQLite, round trips on PostgreSQL.

Counted, not timed: SQLite's trace callback sees every statement the driver runs; libpq's
protocol trace shows every message PostgreSQL receives (a ``Sync`` ends a round trip, a simple
``Query`` is one too -- a pool's pre-ping is one). The expectations are the write path's design
(module docstring of ``steplog.store._append``): on SQLite four statements for any batch, on
PostgreSQL one round trip, and the idempotency look-up only for a re-send.
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

from steplog.errors import ConcurrencyError, IdempotencyError
from steplog.events import Event, StepStarted
from steplog.store import EventStore, NewEvent, sqlite_datetime, utc


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


def test_sqlite_append_is_four_statements_for_any_batch(sqlite_store: EventStore) -> None:
    seen = _sqlite_statements(sqlite_store)
    sqlite_store.append("warm-2", steps(1), 0)  # opens the traced connection: pragmas
    for batch in (1, 2, 100):
        seen.clear()
        sqlite_store.append(f"run-{batch}", steps(batch), 0)
        assert _kinds(seen) == ["BEGIN", "SELECT", "INSERT", "COMMIT"], seen
        assert "max(seq)" in seen[1] and "max(position)" in seen[1]  # one look-up for both
        inserts = [sql for sql in seen if sql.lstrip().upper().startswith("INSERT")]
        assert len(inserts) == batch  # one executemany
        assert not any("SELECT" in sql or "RETURNING" in sql for sql in inserts)
    assert [e.seq for e in sqlite_store.read_run("run-100")] == list(range(100))


def test_sqlite_appends_reuse_a_parked_connection_until_its_pool_is_replaced(
    sqlite_store: EventStore,
) -> None:
    """An append parks its connection for the next (no pool checkout per append); after
    ``Engine.dispose`` the old pool's connection is not reused, and a failed append's goes
    back to the pool rather than to the park."""
    connects: list[object] = []
    event.listen(sqlite_store.engine, "connect", lambda dbapi, _record: connects.append(dbapi))
    sqlite_store.engine.dispose()
    for i in range(3):
        sqlite_store.append(f"p-{i}", steps(1), 0)
    assert len(connects) == 1
    sqlite_store.engine.dispose()
    sqlite_store.append("p-3", steps(1), 0)
    assert len(connects) == 2
    with pytest.raises(ConcurrencyError):
        sqlite_store.append("p-3", steps(1, 1), 0)  # stale version: fails, nothing parked
    assert sqlite_store._writer._park._idle == []
    sqlite_store.append("p-3", steps(1, 1), 1)
    assert len(connects) == 2 and [e.seq for e in sqlite_store.read_run("p-3")] == [0, 1]


def test_sqlite_resend_looks_up_ids_only_after_the_fast_path_stored_nothing(
    sqlite_store: EventStore,
) -> None:
    batch = [NewEvent(e) for e in steps(3)]
    first = sqlite_store.append("r", batch, 0)
    seen = _sqlite_statements(sqlite_store)
    assert sqlite_store.append("r", batch, 0) == first  # a re-send: same positions
    kinds = _kinds(seen)
    # The fast path read the version (3, not 0), inserted nothing and rolled back; only then
    # the look-up.
    assert kinds[:3] == ["BEGIN", "SELECT", "ROLLBACK"], kinds
    assert "LOOKUP" in kinds and kinds.index("LOOKUP") > kinds.index("ROLLBACK")
    assert kinds.count("INSERT") == 0
    seen.clear()
    with pytest.raises(ConcurrencyError):
        sqlite_store.append("r", steps(1), 0)  # a real conflict: new ids, stale version
    assert _kinds(seen)[:3] == ["BEGIN", "SELECT", "ROLLBACK"], seen
    assert [e.event_id for e in sqlite_store.read_run("r")] == [n.event_id for n in batch]


def test_sqlite_append_sends_nothing_through_sqlalchemy_execution(
    sqlite_store: EventStore,
) -> None:
    executed: list[str] = []
    event.listen(sqlite_store.engine, "before_cursor_execute",
                 lambda *args: executed.append(args[2]))  # fmt: skip
    sqlite_store.append("r", steps(10), 0)
    assert executed == []  # every statement runs on the driver
    assert [e.seq for e in sqlite_store.read_run("r")] == list(range(10))


def _pg_round_trips(store: EventStore, trace_path: Path, appends: Any) -> list[str]:
    """What the client sent while ``appends()`` ran on the store's append connection (parked
    after a first append: taken from the park and put back, untouched)."""
    park = store._writer._park
    pool, pooled = park.take()
    pgconn = pooled.dbapi_connection.pgconn
    fd = os.open(trace_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    pgconn.trace(fd)
    park.give_back(pool, pooled)
    try:
        appends()
    finally:
        pgconn.untrace()
        os.close(fd)
    sent = [line.split("\t") for line in trace_path.read_text().splitlines()]
    return [fields[3] for fields in sent if len(fields) > 3 and fields[1] == "F"]


@pytest.mark.postgres
def test_postgres_append_is_one_round_trip(pg_url: str, tmp_path: Path) -> None:
    store = EventStore.open(pg_url)
    try:
        run = f"r-{uuid.uuid4().hex}"
        store.append(f"warm-{run}", steps(1), 0)
        from_client = _pg_round_trips(
            store,
            tmp_path / "libpq.trace",
            lambda: (store.append(run, steps(100), 0), store.append(run, steps(1, 100), 100)),
        )
        # One Sync per append (Parse/Bind/Describe/Execute of ``SELECT steplog_append``), no
        # pre-ping, no BEGIN, no COMMIT: the statement is its own transaction.
        assert from_client.count("Sync") == 2 and "Query" not in from_client, from_client
        assert [e.seq for e in store.read_run(run)] == list(range(101))
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_conflict_and_resend_store_nothing_and_map_to_the_same_errors(
    pg_url: str, tmp_path: Path
) -> None:
    store = EventStore.open(pg_url)
    try:
        run = f"r-{uuid.uuid4().hex}"
        batch = [NewEvent(e) for e in steps(3)]
        first = store.append(run, batch, 0)
        resent = store.append_batch(run, batch, 0)
        assert resent.duplicate and resent.positions == first
        with pytest.raises(ConcurrencyError) as conflict:
            store.append(run, steps(1), 1)
        assert (conflict.value.expected, conflict.value.actual) == (1, 3)
        assert [e.event_id for e in store.read_run(run)] == [n.event_id for n in batch]
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_single_event_appends_keep_the_batch_contract(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of one goes through ``steplog_append_one`` (migration 0008): same positions,
    stored row, version check, re-send and clash answers as ``steplog_append``."""
    from steplog.store import _pg_write

    calls: list[str] = []
    real = _pg_write.pg_statement

    def statement(*args: Any) -> tuple[str, tuple[Any, ...]]:
        sql, params = real(*args)
        calls.append("one" if sql == _pg_write.PG_APPEND_ONE else "many")
        return sql, params

    monkeypatch.setattr(_pg_write, "pg_statement", statement)
    store = EventStore.open(pg_url)
    try:
        run, other = f"r-{uuid.uuid4().hex}", f"o-{uuid.uuid4().hex}"
        at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2)))
        single = NewEvent(StepStarted(step="a", step_index=0, input={"q": "é"}), recorded_at=at)
        twin = NewEvent(StepStarted(step="a", step_index=0, input={"q": "é"}), recorded_at=at)
        (position,) = store.append(run, [single], 0)
        store.append(other, [twin, NewEvent(StepStarted(step="b", step_index=1))], 0)
        assert calls == ["one", "many"]
        mine, theirs = store.read_run(run)[0], store.read_run(other)[0]
        assert (mine.position, mine.seq, mine.recorded_at) == (position, 0, at.astimezone(UTC))
        assert (mine.type, mine.schema_version, mine.payload, mine.recorded_at) == (
            theirs.type,
            theirs.schema_version,
            theirs.payload,
            theirs.recorded_at,
        )
        resent = store.append_batch(run, [single], 0)
        assert resent.duplicate and resent.positions == [position]
        with pytest.raises(ConcurrencyError) as conflict:
            store.append(run, steps(1), 0)
        assert (conflict.value.expected, conflict.value.actual) == (0, 1)
        clash = NewEvent(StepStarted(step="changed", step_index=0), single.event_id)
        with pytest.raises(IdempotencyError, match="different content"):
            store.append(run, [clash], 1)
        (next_position,) = store.append(run, steps(1, 1))  # no expected version: at the end
        assert next_position == store.last_position() and store.version(run) == 2
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_huge_batch_is_chunked_in_one_transaction(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import steplog.store._pg_write as pg_write

    monkeypatch.setattr(pg_write, "PG_CHUNK_EVENTS", 7)
    store = EventStore.open(pg_url)
    try:
        run = f"r-{uuid.uuid4().hex}"
        when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        batch = [NewEvent(e, recorded_at=when if i % 2 else None) for i, e in enumerate(steps(20))]
        positions = store.append(run, batch, 0)
        assert positions == list(range(positions[0], positions[0] + 20))
        stored = store.read_run(run)
        assert [e.seq for e in stored] == list(range(20))
        assert [e.recorded_at == when for e in stored] == [i % 2 == 1 for i in range(20)]
        clash = [NewEvent(e) for e in steps(9, 20)] + [batch[0]]  # a stored id in chunk two
        with pytest.raises(IdempotencyError):
            store.append(run, clash, 20)
        assert store.version(run) == 20  # chunk one was rolled back with it
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


def test_big_batches_pause_the_cyclic_collector_and_restore_it(
    sqlite_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch from GC_PAUSE_MIN_EVENTS on runs with the collector off (its objects die by
    reference counting at the end of the batch); the caller's setting comes back, also after
    an error, and a caller that had it off keeps it off."""
    import gc

    from steplog.store import GC_PAUSE_MIN_EVENTS

    seen: list[bool] = []
    writer = sqlite_store._writer
    real = writer.append_once

    def spy(*args: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(writer, "append_once", spy)
    assert gc.isenabled()
    sqlite_store.append("small", steps(GC_PAUSE_MIN_EVENTS - 1), 0)
    sqlite_store.append("big", steps(GC_PAUSE_MIN_EVENTS), 0)
    assert seen == [True, False] and gc.isenabled()
    with pytest.raises(ConcurrencyError):
        sqlite_store.append("big", steps(GC_PAUSE_MIN_EVENTS, 100), 0)  # stale version
    assert gc.isenabled()
    gc.disable()
    try:
        sqlite_store.append("big", steps(GC_PAUSE_MIN_EVENTS, 100), GC_PAUSE_MIN_EVENTS)
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert [e.seq for e in sqlite_store.read_run("big")] == list(range(2 * GC_PAUSE_MIN_EVENTS))
