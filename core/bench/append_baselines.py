"""The writers ``steplog bench append`` times: steplog itself and the floors it is compared to.

Every writer gets the same pre-built events and the same plan (run id, expected version, batch)
and returns the seconds its writes took and what a read-back of its table found (row count and
a checksum of run id, seq, type and payload in write order), so a writer that drops, reorders or
alters rows is caught rather than timed. Payload bytes are pydantic-core's compact JSON -- what
``EventStore`` writes -- encoded inside the timed section by every writer.
"""

from __future__ import annotations

import gc
import hashlib
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic_core import to_json
from sqlalchemy import text

from ..store import (
    SQLITE_BUSY_TIMEOUT_MS,
    EventStore,
    NewEvent,
    create_engine_for,
    upgrade,
    with_schema,
)

Plan = list[tuple[str, int, Sequence[NewEvent]]]
INSERT_COLUMNS = "position, event_id, run_id, seq, type, schema_version, recorded_at, payload"


@dataclass(frozen=True, slots=True)
class Written:
    """One timed write and its read-back."""

    seconds: float
    rows: int
    checksum: str


def plan_batches(events: Sequence[NewEvent], batch: int) -> Plan:
    """(run id, expected version, events) per append call: runs of ``max(batch, 100)``."""
    run_size = max(batch, 100)
    plan = []
    for start in range(0, len(events), run_size):
        run_id = f"bench-{start // run_size}"
        run_events = events[start : start + run_size]
        for offset in range(0, len(run_events), batch):
            plan.append((run_id, offset, run_events[offset : offset + batch]))
    return plan


def checksum(rows: Iterable[Sequence[object]]) -> str:
    """SHA-256 over ``(run_id, seq, type, payload text)`` rows, in order."""
    digest = hashlib.sha256()
    for run_id, seq, type_name, payload in rows:
        digest.update(f"{run_id}\x1f{seq}\x1f{type_name}\x1f".encode())
        digest.update(payload if isinstance(payload, bytes) else str(payload).encode())
        digest.update(b"\x1e")
    return digest.hexdigest()


def expected_checksum(plan: Plan) -> str:
    """The checksum a correct writer's table yields (computed from the plan, not a writer)."""
    return checksum(
        (run_id, version + i, new.event.type_name(), new.event.model_dump_json())
        for run_id, version, batch in plan
        for i, new in enumerate(batch)
    )


def _timed(action: Callable[[], object]) -> float:
    """Seconds ``action()`` takes, started with no garbage pending from the writer's set-up
    (a store's engine, a baseline's encoded payloads): a full collection of it would otherwise
    land in whichever writer's clock happens to be running. Collection stays on while timed."""
    gc.collect()
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _sqlite_readback(path: Path) -> tuple[int, str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT run_id, seq, type, payload FROM events ORDER BY position")
        found = rows.fetchall()
    return len(found), checksum(found)


def steplog_sqlite(path: Path, plan: Plan) -> Written:
    """``EventStore.append`` per batch, with the expected version (the whole contract)."""
    store = EventStore.open(str(path))
    try:
        seconds = _timed(lambda: [store.append(run, evs, version) for run, version, evs in plan])
    finally:
        store.close()
    return Written(seconds, *_sqlite_readback(path))


def raw_sqlite(path: Path, plan: Plan) -> Written:
    """The floor: ``BEGIN IMMEDIATE; executemany(INSERT); COMMIT`` on the migrated schema.

    Same pragmas as steplog (WAL, ``synchronous=FULL``, busy timeout), positions counted in
    memory, payloads encoded with pydantic-core's ``to_json`` (the bytes steplog writes). It
    checks nothing: no version, no size limit, no idempotency.
    """
    EventStore.open(str(path)).close()  # identical schema, created by the migrations
    payloads = [
        (n.event_id, n.event.type_name(), n.event.model_dump(mode="json"))
        for _, _, b in plan
        for n in b
    ]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    sql = f"INSERT INTO events ({INSERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

    def write() -> None:
        position = 0
        for run_id, version, evs in plan:
            now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
            params = []
            for i in range(len(evs)):
                event_id, type_name, payload = payloads[position]
                position += 1
                params.append(
                    (position, event_id.hex, run_id, version + i, type_name, 1, now,
                     to_json(payload).decode())
                )  # fmt: skip
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(sql, params)
            conn.execute("COMMIT")

    try:
        seconds = _timed(write)
    finally:
        conn.close()
    return Written(seconds, *_sqlite_readback(path))


def eventsourcing_sqlite(path: Path, plan: Plan) -> Written | None:
    """``eventsourcing``'s ``SQLiteApplicationRecorder.insert_events`` (the ``bench`` extra).

    It writes **its own schema** (``stored_events``: originator id, version, topic, state bytes
    plus its notification id), not steplog's: the same payload bytes, one table, its own
    indexes and its own version check. ``None`` when the library is not installed.
    """
    try:
        from eventsourcing.persistence import StoredEvent as ESStoredEvent
        from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore
    except ImportError:
        return None
    datastore = SQLiteDatastore(db_name=str(path))
    recorder = SQLiteApplicationRecorder(datastore)
    recorder.create_table()
    payloads = [
        (n.event.type_name(), n.event.model_dump(mode="json")) for _, _, b in plan for n in b
    ]
    originators = {run_id: uuid.uuid5(uuid.NAMESPACE_URL, run_id) for run_id, _, _ in plan}

    def write() -> None:
        index = 0
        for run_id, version, evs in plan:
            stored = []
            for i in range(len(evs)):
                topic, payload = payloads[index]
                index += 1
                stored.append(
                    ESStoredEvent(originators[run_id], version + i, topic, to_json(payload))
                )
            recorder.insert_events(stored)

    try:
        seconds = _timed(write)
    finally:
        datastore.close()
    names = {originator.hex: run_id for run_id, originator in originators.items()}
    with sqlite3.connect(path) as conn:
        found = conn.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            "ORDER BY rowid"
        ).fetchall()
    rows = [(names.get(uuid.UUID(str(o)).hex, o), v, t, s) for o, v, t, s in found]
    return Written(seconds, len(rows), checksum(rows))


@contextmanager
def pg_scratch_schema(url: str) -> Iterator[str]:
    """A migrated scratch schema on ``url``; yields its scoped URL, drops it afterwards."""
    schema = f"steplog_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine_for(url)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    scoped_url = with_schema(url, schema)
    try:
        engine = create_engine_for(scoped_url)
        upgrade(engine)
        engine.dispose()
        yield scoped_url
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def _pg_readback(scoped_url: str) -> tuple[int, str]:
    """Rows and a checksum with payloads as PostgreSQL's canonical JSONB text."""
    engine = create_engine_for(scoped_url)
    try:
        with engine.connect() as conn:
            found = conn.exec_driver_sql(
                "SELECT run_id, seq, type, payload::text FROM events WHERE run_id <> 'warm-up' "
                "ORDER BY position"
            ).all()
    finally:
        engine.dispose()
    return len(found), checksum([tuple(row) for row in found])


def steplog_postgres(url: str, plan: Plan) -> Written:
    """``EventStore.append`` per batch into a fresh migrated schema."""
    with pg_scratch_schema(url) as scoped_url:
        store = EventStore(create_engine_for(scoped_url))
        store.append(*_warm_up(plan))  # the pool's first connection, outside the clock
        try:
            seconds = _timed(
                lambda: [store.append(run, evs, version) for run, version, evs in plan]
            )
        finally:
            store.close()
        rows, digest = _pg_readback(scoped_url)
    return Written(seconds, rows, digest)


def raw_psycopg(url: str, plan: Plan) -> Written:
    """The PostgreSQL floor: one multi-row ``INSERT`` per batch in autocommit (one round trip,
    atomic, durable with the server's default ``synchronous_commit``), on the same migrated
    schema, positions counted in memory, payloads encoded with pydantic-core's ``to_json``.
    No lock, no version check, no idempotency."""
    import psycopg

    with pg_scratch_schema(url) as scoped_url:
        engine = create_engine_for(scoped_url)
        conninfo = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        engine.dispose()
        payloads = [
            (n.event_id, n.event.type_name(), n.event.model_dump(mode="json"))
            for _, _, b in plan
            for n in b
        ]
        warm_run, warm_events, _ = _warm_up(plan)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO events ({INSERT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (1, warm_events[0].event_id, warm_run, 0, "warm", 1, datetime.now(UTC), "{}"),
            )
            statements: dict[int, str] = {}

            def write() -> None:
                position = 1
                for run_id, version, evs in plan:
                    sql = statements.get(len(evs))
                    if sql is None:
                        values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(evs))
                        sql = statements[len(evs)] = (
                            f"INSERT INTO events ({INSERT_COLUMNS}) VALUES {values}"
                        )
                    now = datetime.now(UTC)
                    params: list[object] = []
                    for i in range(len(evs)):
                        event_id, type_name, payload = payloads[position - 1]
                        position += 1
                        params += (position, event_id, run_id, version + i, type_name, 1, now,
                                   to_json(payload).decode())  # fmt: skip
                    conn.execute(sql, params)

            seconds = _timed(write)
        rows, digest = _pg_readback(scoped_url)
    return Written(seconds, rows, digest)


def expected_pg_checksum(url: str, plan: Plan) -> str:
    """:func:`expected_checksum` with payloads as PostgreSQL's JSONB text (the server's own
    canonical form, asked for in one query), for comparing what the PostgreSQL writers stored."""
    payloads = [new.event.model_dump_json() for _, _, batch in plan for new in batch]
    engine = create_engine_for(url)
    try:
        with engine.connect() as conn:
            canonical = (
                conn.exec_driver_sql(
                    "SELECT p::jsonb::text FROM unnest(%s::text[]) WITH ORDINALITY AS u(p, n) "
                    "ORDER BY n",
                    (payloads,),
                )
                .scalars()
                .all()
            )
    finally:
        engine.dispose()
    keys = [(run_id, version + i, new.event.type_name()) for run_id, version, batch in plan
            for i, new in enumerate(batch)]  # fmt: skip
    return checksum([(*key, payload) for key, payload in zip(keys, canonical, strict=True)])


def _warm_up(_plan: Plan) -> tuple[str, Sequence[NewEvent], int]:
    """One event under a run id the plan does not use, to open a connection untimed."""
    from ..events import StepStarted

    return "warm-up", [NewEvent(StepStarted(step="warm", step_index=0))], 0
