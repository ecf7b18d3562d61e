"""``steplog bench scale``: how append, rebuild, queries and compare cost grow with the log.

For each engine (SQLite, PostgreSQL) and store size (default 1M, 5M and 10M events) a store of
real harness runs replicated under new ids is built once and cached (SQLite: the same
``STEPLOG_HOME/bench/rebuild-N.db`` files ``steplog bench rebuild`` uses; PostgreSQL: schema
``bench_scale_N``, loaded from the SQLite store of the same size with ``COPY``, so both engines
hold identical events). On each store it measures:

* ``raw``: read every event in position order and decode its payload (sqlite3 + ``json.loads``;
  psycopg's server-side cursor, whose JSONB loader is ``json.loads``) -- the floor of any pass;
* ``rebuild``: ``steplog rebuild``'s code path, from position 0 (raw and rebuild each run in
  their own process, which reports its peak RSS);
* ``failures``: the ``steplog failures`` query (one scenario, one model version, page 1) and
  the drill-down into its top signature (``list_runs(signature=...)``, page 1);
* ``compare``: :func:`steplog.compare.compare` of the scenario's two demo versions;
* ``append``: a fixed workload through ``EventStore.append`` (durable commits), removed again
  afterwards, in rounds alternating with the same workload into a fresh empty store;
* the bytes on disk: the events table with its indexes, and everything.

Growth is reported as ratios against the smallest size of the same engine: rebuild time per
event and the indexed queries should stay near 1.0x while the store grows 10x. The rebuild and
the compare also report their process's own CPU time, which moves far less than wall time when
other work shares the machine; each append round is paired with an empty-store round for the
same reason.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
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

from ..database import (
    create_engine_for,
    current_revision,
    redact,
    sqlite_path,
    steplog_home,
    upgrade,
    with_schema,
)
from ..errors import ConfigurationError, DatabaseError
from ..models import events_table
from ..store import EventStore
from .append import _batches, make_workload
from .stores import COLUMNS, ceil_div, replicated_store

SIZES: Final = (1_000_000, 5_000_000, 10_000_000)
ENGINES: Final = ("sqlite", "postgresql")
SCHEMA_PREFIX: Final = "bench_scale_"
APPEND_PREFIX: Final = "scale-append-"
"""Run ids of the append workload, deleted after each measurement."""
QUERY_REPEAT: Final = 5
"""Timed repetitions of each query per ``repeat`` (median kept)."""
PAGE_SIZE: Final = 5000


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PassResult:
    """One pass over the log, measured in its own process.

    ``cpu_seconds`` is that process's own CPU time (user + system): on a shared machine it moves
    far less than wall time. On PostgreSQL the server's share of the work is not in it.
    """

    events: int
    seconds: float
    cpu_seconds: float
    peak_rss_mb: float

    @property
    def events_per_second(self) -> float:
        """Throughput (wall clock)."""
        return self.events / self.seconds


@dataclass(frozen=True, slots=True)
class ScaleResult:
    """Every measurement on one store (one engine, one size)."""

    engine: str
    size: int
    events: int
    runs: int
    build_seconds: float | None
    """``None`` when the cached store was reused."""
    event_bytes: int
    """The events table and its indexes."""
    disk_bytes: int
    """Everything the store occupies: events, read models, free pages (SQLite file size)."""
    append_events: int
    append_batch: int
    append_seconds: float
    empty_append_seconds: float
    """The same workload into a fresh, empty store, alternating with the rounds above."""
    raw: PassResult
    rebuild: PassResult
    scenario: str
    failures_version: str
    """The failures query lists this version's signatures in ``scenario`` (page 1)."""
    failures_seconds: float
    failures_found: int
    signature_runs_seconds: float
    signature_failed_runs: int
    compare_seconds: float
    compare_cpu_seconds: float
    compare_runs: int
    load_average: float
    """The machine's 1-minute load average when this store's measurements ended."""

    @property
    def append_events_per_second(self) -> float:
        """Throughput of the append workload at this store size."""
        return self.append_events / self.append_seconds

    @property
    def append_vs_empty(self) -> float:
        """Append events/s at this size over the same workload into an empty store."""
        return self.empty_append_seconds / self.append_seconds

    @property
    def rebuild_vs_raw(self) -> float:
        """Rebuild events/s over the raw pass's events/s."""
        return self.rebuild.events_per_second / self.raw.events_per_second

    @property
    def bytes_per_event(self) -> float:
        """Events table plus its indexes, per event."""
        return self.event_bytes / self.events

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form with the derived figures."""
        data = asdict(self)
        for name in ("raw", "rebuild"):
            data[name]["events_per_second"] = getattr(self, name).events_per_second
        data["append_events_per_second"] = self.append_events_per_second
        data["empty_append_events_per_second"] = self.append_events / self.empty_append_seconds
        data["append_vs_empty"] = self.append_vs_empty
        data["rebuild_vs_raw"] = self.rebuild_vs_raw
        data["bytes_per_event"] = self.bytes_per_event
        return data


@dataclass(slots=True)
class ScaleReport:
    """All stores measured, and the machine they were measured on."""

    machine: dict[str, Any]
    results: list[ScaleResult] = field(default_factory=list)

    def growth(self, result: ScaleResult) -> dict[str, float]:
        """Ratios against the smallest store of the same engine (1.0 = did not grow)."""
        base = min((r for r in self.results if r.engine == result.engine), key=lambda r: r.events)
        return {
            "events": result.events / base.events,
            "append_events_per_second": result.append_events_per_second
            / base.append_events_per_second,
            "rebuild_seconds": result.rebuild.seconds / base.rebuild.seconds,
            "rebuild_seconds_per_event": (result.rebuild.seconds / result.events)
            / (base.rebuild.seconds / base.events),
            "rebuild_cpu_seconds_per_event": (result.rebuild.cpu_seconds / result.events)
            / (base.rebuild.cpu_seconds / base.events),
            "failures_seconds": result.failures_seconds / base.failures_seconds,
            "signature_runs_seconds": result.signature_runs_seconds / base.signature_runs_seconds,
            "compare_seconds": result.compare_seconds / base.compare_seconds,
            "compare_seconds_per_run": (result.compare_seconds / result.compare_runs)
            / (base.compare_seconds / base.compare_runs),
            "compare_cpu_seconds_per_run": (result.compare_cpu_seconds / result.compare_runs)
            / (base.compare_cpu_seconds / base.compare_runs),
            "bytes_per_event": result.bytes_per_event / base.bytes_per_event,
        }

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form: the machine, and per store its figures and growth."""
        return {
            "machine": self.machine,
            "results": [{**r.as_dict(), "growth": self.growth(r)} for r in self.results],
        }


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


# --- measurements ----------------------------------------------------------------------------


def _pass(kind: str, url: str, update: Callable[[int, int], None]) -> PassResult:
    """Run the raw pass or the rebuild in its own process, following its progress."""
    child = subprocess.Popen(
        [sys.executable, "-m", "steplog.bench.scale", kind, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    noise: list[str] = []
    for line in child.stderr:
        if line.startswith("progress "):
            done, total = (int(n) for n in line.split()[1:3])
            update(done, total)
        else:
            noise.append(line)
    out = child.stdout.read()
    if child.wait() != 0:
        raise RuntimeError(f"the {kind} pass over {redact(url)} failed:\n{''.join(noise)}")
    return PassResult(**json.loads(out.strip().splitlines()[-1]))


def _child(kind: str, url: str) -> dict[str, Any]:
    """One pass in this process (through ``python -m``): progress on stderr, result on stdout."""
    last = 0.0

    def report(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= 0.5 or done >= total:
            last = now
            print(f"progress {done} {total}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_at_start = usage.ru_utime + usage.ru_stime
    if kind == "raw":
        count = _raw_pass(url, report)
    else:
        from ..projections.library import LibraryProjection

        store = EventStore.open(url, auto_migrate=True)  # a schema this benchmark owns
        try:
            count = LibraryProjection(store).rebuild(progress=report)  # steplog rebuild's path
        finally:
            store.close()
    seconds = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "events": count,
        "seconds": seconds,
        "cpu_seconds": usage.ru_utime + usage.ru_stime - cpu_at_start,
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }


def _raw_pass(url: str, report: Callable[[int, int], None]) -> int:
    select_all = f"SELECT {COLUMNS} FROM events ORDER BY position"
    count = 0
    path = sqlite_path(url)
    if path is not None:
        conn = sqlite3.connect(path)
        try:
            total = int(conn.execute("SELECT max(position) FROM events").fetchone()[0] or 0)
            cursor = conn.execute(select_all)
            while rows := cursor.fetchmany(PAGE_SIZE):
                for row in rows:
                    json.loads(row[7])
                count += len(rows)
                report(count, total)
        finally:
            conn.close()
        return count
    engine = create_engine_for(url)
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            total = int(cur.execute("SELECT max(position) FROM events").fetchone()[0] or 0)
        with pg.cursor(name="steplog_raw_pass") as cur:  # server-side; JSONB -> json.loads
            cur.itersize = PAGE_SIZE
            cur.execute(select_all)
            while rows := cur.fetchmany(PAGE_SIZE):
                count += len(rows)
                report(count, total)
        pg.rollback()
    finally:
        raw.close()
        engine.dispose()
    return count


def _timed(action: Callable[[], object], times: int) -> tuple[float, float]:
    """Median wall-clock and median CPU seconds (this process) of ``times`` calls."""
    wall, cpu = [], []
    for _ in range(times):
        started, cpu_started = time.perf_counter(), time.process_time()
        action()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    return statistics.median(wall), statistics.median(cpu)


def _append_seconds(
    store: EventStore, events: int, batch: int, update: Callable[[int, int], None]
) -> float:
    """Append a fresh workload (ids made before the clock starts), then delete it again."""
    tag = f"{APPEND_PREFIX}{uuid.uuid4().hex[:8]}-"
    plan = [
        (tag + run, version, evs) for run, version, evs in _batches(make_workload(events), batch)
    ]
    done = 0
    started = time.perf_counter()
    for run_id, version, evs in plan:
        store.append(run_id, evs, version)
        done += len(evs)
        if done % (batch * 20) == 0:
            update(done, events)
    seconds = time.perf_counter() - started
    update(events, events)
    run_ids = sorted({run_id for run_id, _, _ in plan})
    with store.engine.begin() as conn:
        conn.execute(delete(events_table).where(events_table.c.run_id.in_(run_ids)))
    return seconds


@contextmanager
def _empty_store(engine: str, pg_url: str | None, schema_prefix: str) -> Iterator[EventStore]:
    """A fresh, migrated store on ``engine`` (a file next to the cached ones, or a schema)."""
    if engine == "sqlite":
        folder = steplog_home() / "bench"
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="scale-empty-", dir=folder) as tmp:
            store = EventStore.open(str(Path(tmp) / "empty.db"))
            try:
                yield store
            finally:
                store.close()
        return
    assert pg_url is not None
    schema = f"{schema_prefix}empty"
    admin = create_engine_for(pg_url)
    try:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        scoped = create_engine_for(with_schema(pg_url, schema))
        upgrade(scoped)
        store = EventStore(scoped)
        try:
            yield store
        finally:
            store.close()
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        admin.dispose()


def _append_rounds(
    store: EventStore,
    *,
    pg_url: str | None,
    schema_prefix: str,
    events: int,
    batch: int,
    repeat: int,
    progress: _Progress,
    label: str,
) -> tuple[float, float]:
    """Median seconds of the workload into ``store`` and into a fresh empty store.

    The rounds alternate (empty, this store, empty, ...), so both sides see the same load on
    a shared machine and their ratio is fair even when the absolute figures drift.
    """
    engine = store.engine.dialect.name
    at_size: list[float] = []
    empty: list[float] = []
    for attempt in range(1, repeat + 1):
        with (
            _empty_store(engine, pg_url, schema_prefix) as fresh,
            progress.bar(f"{label}: append {attempt}/{repeat}, empty store", events) as update,
        ):
            empty.append(_append_seconds(fresh, events, batch, update))
        with progress.bar(f"{label}: append {attempt}/{repeat}", events) as update:
            at_size.append(_append_seconds(store, events, batch, update))
    if engine != "sqlite":
        with store.engine.connect() as conn:  # the deleted rows' space, for the next run
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM events")
    return statistics.median(at_size), statistics.median(empty)


def _disk(store: EventStore) -> tuple[int, int]:
    """(bytes of the events table and its indexes, bytes of everything)."""
    path = sqlite_path(store.engine.url.render_as_string(hide_password=False))
    if path is not None:
        lite = sqlite3.connect(path)
        try:
            lite.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            event_bytes = lite.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN "
                "(SELECT name FROM sqlite_schema WHERE tbl_name = 'events')"
            ).fetchone()[0]
        finally:
            lite.close()
        return int(event_bytes), path.stat().st_size
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
            )
        )
        sizes = {str(name): int(size) for name, size in rows}
    return sizes["events"], sum(sizes.values())


def _scenario_and_versions(scenario: str | None) -> tuple[str, str, str]:
    from ..harness.scenario import registered_scenarios

    specs = registered_scenarios()
    name = scenario or sorted(specs)[0]
    if name not in specs:
        raise ConfigurationError(f"no scenario {name!r}; known: {', '.join(sorted(specs))}")
    baseline, candidate = specs[name].versions_for_demo()[:2]
    return name, baseline, candidate


def measure(
    built: BenchStore,
    *,
    append_events: int,
    append_batch: int,
    repeat: int,
    scenario: str | None,
    progress: _Progress,
    pg_url: str | None = None,
    schema_prefix: str = SCHEMA_PREFIX,
) -> ScaleResult:
    """Raw pass, rebuild, queries, compare and append on one store."""
    from ..compare import compare
    from ..projections.queries import list_failures, list_runs

    label = f"{built.engine} {built.size:,}"
    with progress.bar(f"{label}: raw read + decode", built.events) as update:
        raw = _pass("raw", built.url, update)
    with progress.bar(f"{label}: rebuild", built.events) as update:
        rebuilt = _pass("rebuild", built.url, update)
    progress.say(
        f"{label}: raw {raw.events_per_second:,.0f} ev/s, rebuild "
        f"{rebuilt.events_per_second:,.0f} ev/s ({rebuilt.seconds:,.1f} s); queries ..."
    )
    name, baseline, candidate = _scenario_and_versions(scenario)
    store = EventStore.open(built.url, auto_migrate=True)
    try:
        if built.engine == "postgresql":  # autovacuum would do it within a minute
            with store.engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                    "ANALYZE run_summaries, failure_signatures, regression_set_members"
                )
        for version in (baseline, candidate):  # the filter: a version that has failures
            found = list_failures(store, scenario=name, model_version=version, limit=30)
            if found:
                break
        else:
            raise RuntimeError(f"no failures in scenario {name!r}: nothing to query")
        top = found[0]
        times = QUERY_REPEAT * repeat
        failures_seconds, _ = _timed(
            lambda: list_failures(store, scenario=name, model_version=version, limit=30), times
        )
        list_runs(store, signature=top.signature, limit=50)  # warm, like the failures query
        runs_seconds, _ = _timed(lambda: list_runs(store, signature=top.signature, limit=50), times)
        report = compare(store, baseline=baseline, candidate=candidate, scenario=name)
        compared = int(report["baseline"]["runs"]) + int(report["candidate"]["runs"])
        compare_seconds, compare_cpu_seconds = _timed(
            lambda: compare(store, baseline=baseline, candidate=candidate, scenario=name),
            repeat,
        )
        progress.say(
            f"{label}: failures {failures_seconds * 1000:.1f} ms, signature runs "
            f"{runs_seconds * 1000:.1f} ms, compare {compare_seconds:.2f} s; appending ..."
        )
        append_seconds, empty_seconds = _append_rounds(
            store,
            pg_url=pg_url,
            schema_prefix=schema_prefix,
            events=append_events,
            batch=append_batch,
            repeat=repeat,
            progress=progress,
            label=label,
        )
        event_bytes, disk_bytes = _disk(store)
    finally:
        store.close()
    return ScaleResult(
        engine=built.engine,
        size=built.size,
        events=built.events,
        runs=built.runs,
        build_seconds=built.build_seconds,
        event_bytes=event_bytes,
        disk_bytes=disk_bytes,
        append_events=append_events,
        append_batch=append_batch,
        append_seconds=append_seconds,
        empty_append_seconds=empty_seconds,
        raw=raw,
        rebuild=rebuilt,
        scenario=name,
        failures_version=version,
        failures_seconds=failures_seconds,
        failures_found=len(found),
        signature_runs_seconds=runs_seconds,
        signature_failed_runs=top.count,
        compare_seconds=compare_seconds,
        compare_cpu_seconds=compare_cpu_seconds,
        compare_runs=compared,
        load_average=os.getloadavg()[0],
    )


def _machine(pg_url: str | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "load_average_at_start": os.getloadavg()[0],
    }
    if pg_url is not None:
        ensure_database(pg_url)
        engine = create_engine_for(pg_url)
        try:
            with engine.connect() as conn:
                for setting in ("server_version", "shared_buffers", "max_wal_size", "autovacuum"):
                    info[f"postgresql_{setting}"] = conn.exec_driver_sql(f"SHOW {setting}").scalar()
        finally:
            engine.dispose()
    return info


def run_scale_benchmark(
    *,
    sizes: Sequence[int] = SIZES,
    engines: Sequence[str] = ENGINES,
    pg_url: str | None = None,
    append_events: int = 20_000,
    append_batch: int = 100,
    repeat: int = 3,
    scenario: str | None = None,
    schema_prefix: str = SCHEMA_PREFIX,
    progress: Console | None = None,
    on_result: Callable[[ScaleReport], None] | None = None,
) -> ScaleReport:
    """Build (or reuse) every store and measure it; ``on_result`` sees the report grow."""
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown or not engines:
        raise ConfigurationError(f"engines must be among {', '.join(ENGINES)}, not {unknown}")
    if "postgresql" in engines and pg_url is None:
        raise ConfigurationError("the postgresql engine needs --db postgresql://...")
    if not sizes or min(sizes) < 1:
        raise ConfigurationError("sizes must be positive event counts")
    shown = _Progress(progress)
    report = ScaleReport(_machine(pg_url if "postgresql" in engines else None))
    ordered = sorted(set(sizes))
    for engine in (e for e in ENGINES if e in engines):
        for size in ordered:
            source = sqlite_store(size, shown)
            if engine == "sqlite":
                built = source
            else:
                assert pg_url is not None
                built = postgres_store(size, pg_url, source, shown, schema_prefix)
            result = measure(
                built,
                append_events=append_events,
                append_batch=append_batch,
                repeat=repeat,
                scenario=scenario,
                progress=shown,
                pg_url=pg_url,
                schema_prefix=schema_prefix,
            )
            report.results.append(result)
            r = result
            summary = (
                f"{r.events:,} events, append {r.append_events_per_second:,.0f} ev/s "
                f"({r.append_vs_empty:.2f}x empty)",
                f"rebuild {r.rebuild.seconds:,.1f} s",
                f"compare {r.compare_seconds:.2f} s",
                f"{r.disk_bytes / 1e9:.2f} GB",
            )
            shown.say(f"{engine} {size:,}: done -- {', '.join(summary)}")
            if on_result is not None:
                on_result(report)
    return report


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], sys.argv[2])))
