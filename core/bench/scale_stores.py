"""The stores ``steplog bench scale`` measures: built once per engine and size, then cached.

A SQLite file under ``STEPLOG_HOME/bench``; a PostgreSQL schema per size, filled by ``COPY``
from the SQLite store of the same size.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from sqlalchemy import delete, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError

from ..errors import ConfigurationError, DatabaseError
from ..models import events_table
from ..store import (
    EventStore,
    create_engine_for,
    current_revision,
    redact,
    sqlite_path,
    steplog_home,
    upgrade,
    with_schema,
)
from .stores import COLUMNS, ceil_div, replicated_store

SCHEMA_PREFIX: Final = "bench_scale_"
APPEND_PREFIX: Final = "scale-append-"
"""Run ids of the append workload, deleted after each measurement."""


# --- progress --------------------------------------------------------------------------------


class _Progress:
    """Rich progress bars and phase messages on a console; silent without one."""

    def __init__(self, console: Console | None) -> None:
        self.console = console

    def say(self, message: str) -> None:
        if self.console is not None:
            self.console.print(message, highlight=False)

    @contextmanager
    def bar(self, description: str, total: int) -> Iterator[Callable[[int, int], None]]:
        """``update(done, total)`` for a bar that closes when the block ends."""
        if self.console is None:
            yield lambda _done, _total: None
            return
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
        )
        with progress:
            task = progress.add_task(description, total=total)

            def update(done: int, all_: int) -> None:
                progress.update(task, completed=done, total=max(all_, done))

            yield update


@contextmanager
def _quiet() -> Iterator[Callable[[int, int], None]]:
    yield lambda _done, _total: None


# --- the stores ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchStore:
    """A built (or reused) benchmark store."""

    engine: str
    size: int
    url: str
    events: int
    runs: int
    build_seconds: float | None


def sqlite_store(size: int, progress: _Progress) -> BenchStore:
    """``STEPLOG_HOME/bench/rebuild-{size}.db``, shared with ``steplog bench rebuild``."""
    path = steplog_home() / "bench" / f"rebuild-{size}.db"
    if path.exists():
        _delete_leftovers(f"sqlite:///{path}")
    reused = False

    def enough(_runs: int, have: int) -> bool:
        nonlocal reused
        reused = have >= size
        return reused

    cached = 0
    if path.exists():
        with sqlite3.connect(path) as conn:
            cached = int(conn.execute("SELECT max(position) FROM events").fetchone()[0] or 0)
    started = time.perf_counter()
    if cached < size:
        progress.say(f"sqlite {size:,}: building {path} (real harness runs, replicated) ...")
    with progress.bar(f"sqlite {size:,}: building", 1) if cached < size else _quiet() as update:
        runs, events = replicated_store(
            path,
            enough=enough,
            copies=lambda _runs, per_copy: ceil_div(size, per_copy),
            on_copy=update,
        )
    EventStore.open(str(path)).close()  # a cached file from an older steplog: migrate it
    seconds = None if reused else time.perf_counter() - started
    return BenchStore("sqlite", size, f"sqlite:///{path}", events, runs, seconds)


def ensure_database(url: str) -> None:
    """Create the PostgreSQL database of ``url`` (through the ``postgres`` one) if missing."""
    engine = create_engine_for(url)
    try:
        with engine.connect():
            return
    except OperationalError as exc:
        if "does not exist" not in str(exc.orig):
            raise DatabaseError(f"cannot open {redact(url)}: {exc.orig}") from None
    finally:
        engine.dispose()
    name = make_url(url).database or ""
    if not name.replace("_", "").isalnum():
        raise ConfigurationError(f"database name {name!r} must be letters, digits and '_'")
    maintenance = make_url(url).set(database="postgres").render_as_string(hide_password=False)
    admin = create_engine_for(maintenance, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        admin.dispose()


def postgres_store(
    size: int,
    pg_url: str,
    source: BenchStore,
    progress: _Progress,
    schema_prefix: str = SCHEMA_PREFIX,
) -> BenchStore:
    """Schema ``{schema_prefix}{size}`` holding a copy of the SQLite store ``source``."""
    schema = f"{schema_prefix}{size}"
    url = with_schema(pg_url, schema)
    ensure_database(pg_url)
    admin = create_engine_for(pg_url)
    try:
        with admin.connect() as conn:
            exists = conn.execute(
                text("SELECT 1 FROM pg_namespace WHERE nspname = :s"), {"s": schema}
            ).first()
        engine = create_engine_for(url)
        try:
            if exists and current_revision(engine) is not None:
                upgrade(engine)  # a cached schema of an older steplog: migrate it in place
                _delete_leftovers(url)
                with engine.connect() as conn:
                    events = int(conn.execute(text("SELECT count(*) FROM events")).scalar_one())
                    runs = int(
                        conn.execute(text("SELECT count(DISTINCT run_id) FROM events")).scalar_one()
                    )
                if events >= size:
                    progress.say(f"postgresql {size:,}: reusing schema {schema}")
                    return BenchStore("postgresql", size, url, events, runs, None)
            started = time.perf_counter()
            progress.say(f"postgresql {size:,}: loading schema {schema} from {source.url}")
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
                conn.execute(text(f'CREATE SCHEMA "{schema}"'))
            upgrade(engine)
            source_path = sqlite_path(source.url)
            assert source_path is not None
            with progress.bar(f"postgresql {size:,}: COPY", source.events) as update:
                _copy_events(engine, source_path, source.events, update, progress)
            return BenchStore(
                "postgresql",
                size,
                url,
                source.events,
                source.runs,
                time.perf_counter() - started,
            )
        finally:
            engine.dispose()
    finally:
        admin.dispose()


def _copy_events(
    engine: Engine,
    source: Path,
    total: int,
    update: Callable[[int, int], None],
    progress: _Progress,
) -> None:
    """COPY every event of the SQLite file into the (empty, migrated) events table.

    The unique constraints and secondary indexes are dropped for the load and re-created
    after it (a sorted build instead of millions of random B-tree inserts), then the table is
    vacuumed and analysed; the primary key (ascending positions) stays.
    """
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute("SET maintenance_work_mem = '512MB'")
            cur.execute("SET synchronous_commit = off")
            constraints = cur.execute(
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conrelid = 'events'::regclass AND contype = 'u'"
            ).fetchall()
            indexes = cur.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                "AND tablename = 'events' AND indexname NOT IN "
                "(SELECT conname FROM pg_constraint WHERE conrelid = 'events'::regclass)"
            ).fetchall()
            for name, _ in constraints:
                cur.execute(f'ALTER TABLE events DROP CONSTRAINT "{name}"')
            for name, _ in indexes:
                cur.execute(f'DROP INDEX "{name}"')
            reader = sqlite3.connect(source)
            try:
                rows = reader.execute(f"SELECT {COLUMNS} FROM events ORDER BY position")
                done = 0
                with cur.copy(f"COPY events ({COLUMNS}) FROM STDIN") as copy:
                    while page := rows.fetchmany(10_000):
                        for position, event_id, run_id, seq, kind, ver, at, payload in page:
                            copy.write_row(
                                (position, event_id, run_id, seq, kind, ver, at + "+00", payload)
                            )
                        done += len(page)
                        update(done, total)
            finally:
                reader.close()
            progress.say("  re-creating the unique constraints and indexes ...")
            for name, definition in constraints:
                cur.execute(f'ALTER TABLE events ADD CONSTRAINT "{name}" {definition}')
            for _, definition in indexes:
                cur.execute(definition)
        pg.commit()
        progress.say("  VACUUM ANALYZE events ...")
        pg.autocommit = True
        with pg.cursor() as cur:
            cur.execute("VACUUM (ANALYZE) events")
        pg.autocommit = False
    finally:
        raw.close()


def _delete_leftovers(url: str) -> None:
    """Remove append-workload events an interrupted earlier run left behind."""
    engine = create_engine_for(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                delete(events_table).where(
                    events_table.c.run_id >= APPEND_PREFIX,
                    events_table.c.run_id < APPEND_PREFIX[:-1] + ".",
                    events_table.c.run_id.like(APPEND_PREFIX + "%"),
                )
            )
    finally:
        engine.dispose()
