"""``steplog bench scale``: how append, rebuild, queries and compare cost grow with the log.

For each engine (SQLite, PostgreSQL) and store size (default 1M, 5M and 10M events) a store of
real harness runs replicated under new ids is built once and cached (SQLite: the same
``STEPLOG_HOME/bench/rebuild-N.db`` files ``steplog bench rebuild`` uses; PostgreSQL: schema
``bench_scale_N``, loaded from the SQLite store of the same size with ``COPY``, so both engines
hold identical events). On each store it measures:

* ``raw``: read every event in position order and decode its payload with the decoder
  steplog's readers use (sqlite3 + pydantic-core's ``from_json``; psycopg's server-side cursor,
  whose JSONB loader steplog's PostgreSQL reads use too) -- the floor of any pass;
* ``rebuild``: ``steplog rebuild``'s code path, from position 0 (raw and rebuild each run in
  their own process, which reports its peak RSS);
* ``failures``: the ``steplog failures`` query (one scenario, one model version, page 1) and
  the drill-down into its top signature (``list_runs(signature=...)``, page 1);
* ``compare``: :func:`steplog.compare.compare` of the scenario's two demo versions;
* ``append``: a fixed workload through ``EventStore.append`` (durable commits), removed again
  afterwards, in rounds alternating with the same workload into a fresh empty store;
* the bytes on disk: the events table with its indexes, and everything;
* on PostgreSQL, the server's CPU per action and the tables each read path scans sequentially
  (:mod:`.scale_plans`).

Growth is reported as ratios against the smallest size of the same engine: rebuild time per
event and the indexed queries should stay near 1.0x while the store grows 10x. The rebuild and
the compare also report their process's own CPU time, which moves far less than wall time when
other work shares the machine; each append round is paired with an empty-store round for the
same reason.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from sqlalchemy import delete, text

from ..errors import ConfigurationError
from ..models import events_table
from ..store import (
    EventStore,
    create_engine_for,
    sqlite_path,
    steplog_home,
    upgrade,
    with_schema,
)
from .append import make_workload
from .append_baselines import plan_batches
from .scale_pass import measure_pass
from .scale_plans import ServerSide, sequential_scans, server_cpu_of, server_is_local
from .scale_results import ScaleReport as ScaleReport
from .scale_results import ScaleResult as ScaleResult
from .scale_stores import (
    APPEND_PREFIX,
    SCHEMA_PREFIX,
    BenchStore,
    _Progress,
    ensure_database,
    postgres_store,
    sqlite_store,
)

SIZES: Final = (1_000_000, 5_000_000, 10_000_000)
ENGINES: Final = ("sqlite", "postgresql")
QUERY_REPEAT: Final = 5
"""Timed repetitions of each query per ``repeat`` (median kept)."""


# --- measurements ----------------------------------------------------------------------------


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
        (tag + run, version, evs)
        for run, version, evs in plan_batches(make_workload(events), batch)
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
    local = built.engine == "postgresql" and server_is_local(built.url)
    server_cpu: dict[str, float | None] = {}
    with progress.bar(f"{label}: raw read + decode", built.events) as update:
        raw = measure_pass("raw", built.url, update)
    with progress.bar(f"{label}: rebuild", built.events) as update:
        rebuilt, server_cpu["rebuild"] = server_cpu_of(
            lambda: measure_pass("rebuild", built.url, update), local=local
        )
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
        paths: dict[str, Callable[[], object]] = {
            "failures": lambda: list_failures(
                store, scenario=name, model_version=version, limit=30
            ),
            "signature runs": lambda: list_runs(store, signature=top.signature, limit=50),
            "compare": lambda: compare(
                store, baseline=baseline, candidate=candidate, scenario=name
            ),
        }
        (failures_seconds, _), cpu = server_cpu_of(
            lambda: _timed(paths["failures"], times), local=local
        )
        server_cpu["failures"] = None if cpu is None else cpu / times
        paths["signature runs"]()  # warm, like the failures query
        (runs_seconds, _), cpu = server_cpu_of(
            lambda: _timed(paths["signature runs"], times), local=local
        )
        server_cpu["signature runs"] = None if cpu is None else cpu / times
        report = compare(store, baseline=baseline, candidate=candidate, scenario=name)
        compared = report.baseline.runs + report.candidate.runs
        (compare_seconds, compare_cpu_seconds), cpu = server_cpu_of(
            lambda: _timed(paths["compare"], repeat), local=local
        )
        server_cpu["compare"] = None if cpu is None else cpu / repeat
        server = None
        if built.engine == "postgresql":
            scans = {path: sequential_scans(store.engine, run) for path, run in paths.items()}
            server = ServerSide(server_cpu, scans)
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
        server=server,
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
