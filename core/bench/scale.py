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
* the bytes on disk: the events table with its indexes, and everything.

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
from dataclasses import asdict, dataclass, field
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
from .scale_pass import PassResult, measure_pass
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


# --- results ---------------------------------------------------------------------------------


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
    with progress.bar(f"{label}: raw read + decode", built.events) as update:
        raw = measure_pass("raw", built.url, update)
    with progress.bar(f"{label}: rebuild", built.events) as update:
        rebuilt = measure_pass("rebuild", built.url, update)
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
