"""``steplog bench ingest``: can ``steplog serve`` keep up with a busy exporter, losing nothing?

A client in this process sends pre-encoded OTLP protobuf requests (gzip, 512 spans each, as the
SDK's batch processor does) at a fixed span rate for a fixed time to a ``steplog serve`` running
as a separate process. Every trace is an agent run of ``spans_per_trace`` spans (an
``invoke_agent`` root over alternating ``chat`` and ``execute_tool`` children), so the events
each trace must become are known. After the last acknowledgement the benchmark waits for the
receiver to assemble everything, then looks up every trace it sent, by id.

**Baseline** (measured in the same run, before steplog): the same client, same requests, same two
connections, unpaced, against a receiver in its own process that parses each request with
steplog's own decoder (gunzip, protobuf, spans) and discards it -- the floor of receiving, with
nothing redacted, stored or assembled. Acknowledged and assembled rates are reported against it.

Reported: spans acknowledged per second against the target rate, request latencies; assembly
throughput in steady state (:func:`steady_assembly_rate`: the spans of the runs that became
visible after the first run did, over the seconds from the first run visible to the last), so
the constant delay before a trace is ready (its root's settle time, ~1 s) is not counted as
slowness -- it is reported on its own as ``first_visible_seconds`` and bounded, with every
other delay, by the visibility figures; how long each run took to become visible (its terminal
event stored) after the last of its spans was acknowledged -- median, p99 and worst, target
<= 10 s; loss counted per trace sent (its run found by id with every expected event), so a
non-empty ``--db`` cannot hide a loss; the machine's load average; and whether the store was
fresh (cold: a new ``serve`` process on an empty store; the baseline is a new process too).

This module runs the benchmark (a fresh store, ``steplog serve``, a watcher of the runs ending,
the look-up of every trace sent); the client and its baseline are :mod:`.ingest_client`, the
report and its verdict :mod:`.ingest_report`.

``db`` may be a PostgreSQL URL: the benchmark then runs in a fresh schema of that database
(``steplog_bench_ingest_PID``, dropped afterwards).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..store import EventStore
from .disk import grouped, table_bytes
from .ingest_client import (
    SPANS_PER_REQUEST,
    BacklogWatcher,
    build_requests,
    events_per_trace,
    free_port,
    measure_baseline,
    send_at_rate,
)
from .ingest_cpu import CpuMeter, with_application
from .ingest_report import (
    VISIBLE_WITHIN,
    IngestBench,
    percentile,
    steady_assembly_rate,
    visibility_lags,
)


@dataclass(frozen=True, slots=True)
class Found:
    """What the store holds of the traces sent, looked up by id."""

    traces_found: int
    events_found: int
    spans_left_staged: int
    traces_revised: int = 0  # found runs mapped again (spans came after the run was assembled)


def find_sent(url: str, trace_ids: list[str], events_each: int) -> Found:
    """Look every sent trace up by its run id: a trace is found when its run, as it now reads,
    holds ``events_each`` events, the last of them terminal; spans of sent traces still staged
    are counted too. Other runs in the store are not counted.

    A run reads from its last ``RunRevised`` on when it has one (that event takes
    ``RunStarted``'s place): spans that reach the receiver after their run was assembled (a
    request pushed back while the next one, holding the trace's root, went through) revise it,
    and the revision holds the whole trace. A trace assembled twice from the same spans would
    still be caught: its run would hold two runs' worth of events with no revision between."""
    from sqlalchemy import and_, case, func, or_, select

    from ..ingest.otlp.genai import run_id_for
    from ..models import events_table, staged_spans_table
    from ..store import create_engine_for

    e, s = events_table.c, staged_spans_table.c
    engine = create_engine_for(url)
    found = events = staged = revised = 0
    terminal = ("RunCompleted", "RunFailed")
    try:
        with engine.connect() as conn:
            for start in range(0, len(trace_ids), 500):
                chunk = trace_ids[start : start + 500]
                runs = [run_id_for(t) for t in chunk]
                revisions = dict(
                    conn.execute(
                        select(e.run_id, func.max(e.position))
                        .where(e.run_id.in_(runs), e.type == "RunRevised")
                        .group_by(e.run_id)
                    ).all()
                )
                revised += len(revisions)
                current = or_(
                    e.run_id.in_([run for run in runs if run not in revisions]),
                    *(and_(e.run_id == run, e.position >= at) for run, at in revisions.items()),
                )
                query = (
                    select(
                        e.run_id,
                        func.count(),
                        func.sum(case((e.type.in_(terminal), 1), else_=0)),
                    )
                    .where(current)
                    .group_by(e.run_id)
                )
                for _, count, ends in conn.execute(query):
                    events += min(int(count), events_each)
                    found += int(count) == events_each and int(ends or 0) == 1
                staged += int(
                    conn.execute(
                        select(func.count())
                        .select_from(staged_spans_table)
                        .where(s.trace_id.in_(chunk))
                    ).scalar()
                    or 0
                )
    finally:
        engine.dispose()
    return Found(found, events, staged, revised)


def run_ingest_benchmark(
    *,
    rate: int = 10_000,
    seconds: float = 30.0,
    spans_per_trace: int = 10,
    db: str | None = None,
    workers: int = 1,
    assemblers: int = 1,
    receivers: int = 1,
    backpressure_seconds: float | None = None,
    backpressure_min_spans: int | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> IngestBench:
    """Measure the parse-and-discard receiver, then ``steplog serve`` (``receivers`` processes
    on one store, the client spreading its connections over them, with ``serve``'s
    backpressure options when given); watch runs appear and the staged backlog; look up every
    trace sent."""
    load_before = os.getloadavg()[0]
    traces = max(1, int(rate * seconds) // spans_per_trace)
    progress(f"encoding {traces:,} traces of {spans_per_trace} spans")
    bodies, counts, trace_ids = build_requests(traces, spans_per_trace)

    progress("baseline: the same requests, unpaced, to a receiver that parses and discards them")
    baseline = measure_baseline(bodies, counts)

    with (
        tempfile.TemporaryDirectory(prefix="steplog-bench-ingest-") as folder,
        _fresh_store(db, Path(folder)) as url,
    ):
        before = _last_position(url)
        watcher = _RunWatcher(url, after=before)
        serve_url = with_application(url)
        backpressure = _backpressure_options(backpressure_seconds, backpressure_min_spans)
        with _receivers(
            serve_url, receivers, workers=workers, assemblers=assemblers, options=backpressure
        ) as (ports, pids):
            meter = CpuMeter(url, pids)
            backlog = BacklogWatcher(ports)
            try:
                watcher.start()
                backlog.start()
                meter.start()
                progress(
                    f"sending {sum(counts):,} spans at {rate:,}/s for {seconds:g} s"
                    + (f" across {receivers} receivers" if receivers > 1 else "")
                )
                sending_started = time.perf_counter()
                result = send_at_rate(ports, bodies, counts, rate)
                progress("waiting for the receivers to assemble every trace")
                lag_started = time.perf_counter()
                expected = traces * events_per_trace(spans_per_trace)
                _wait_for_events(url, before + expected, stalled=60.0)
                lag = time.perf_counter() - lag_started
                cpu = meter.finish()
                watcher.stop_and_join()
                backlog.stop_and_join()
                found = find_sent(url, trace_ids, events_per_trace(spans_per_trace))
                disk = grouped(table_bytes(url))
            finally:
                watcher.stop_and_join()
                backlog.stop_and_join()
                meter.finish()
    visible = visibility_lags(trace_ids, spans_per_trace, result.acknowledged_at, watcher.seen_at)
    sent_runs = {f"otel-{t}" for t in trace_ids}
    seen = [at for run, at in watcher.seen_at.items() if run in sent_runs]
    return IngestBench(
        target_spans_per_second=rate,
        seconds=result.seconds,
        spans_per_trace=spans_per_trace,
        spans_sent=result.spans_sent,
        spans_acknowledged=result.spans_acknowledged,
        spans_per_second=result.spans_per_second,
        baseline_spans_per_second=baseline.spans_per_second,
        p50_latency_ms=statistics.median(result.latencies_ms),
        p99_latency_ms=percentile(result.latencies_ms, 0.99),
        failed_requests=result.failed_requests,
        pushed_back_requests=result.pushed_back,
        largest_backlog_spans=backlog.largest,
        backlog_bound_spans=backlog.bound_at_largest,
        assembly_lag_seconds=lag,
        assembly_spans_per_second=steady_assembly_rate(seen, spans_per_trace, sending_started),
        first_visible_seconds=min(seen) - sending_started if seen else None,
        visible_p50_seconds=statistics.median(visible) if visible else None,
        visible_p99_seconds=percentile(visible, 0.99) if visible else None,
        visible_max_seconds=max(visible) if len(visible) == traces else None,
        engine="postgresql" if url.startswith("postgresql") else "sqlite",
        traces_sent=traces,
        traces_found=found.traces_found,
        events_expected=expected,
        events_found=found.events_found,
        spans_left_staged=found.spans_left_staged,
        traces_revised=found.traces_revised,
        assemblers=assemblers,
        receivers=receivers,
        store="fresh" if before == 0 else f"existing: {before:,} events before",
        load_average=(load_before, os.getloadavg()[0]),
        disk_bytes=disk,
        assembler_cpu_seconds=cpu.assemblers,
        database_cpu_seconds=cpu.database,
    )


def _backpressure_options(seconds: float | None, min_spans: int | None) -> list[str]:
    """``steplog serve``'s backpressure options for the values given (none: its defaults)."""
    options = [] if seconds is None else ["--backpressure-seconds", f"{seconds:g}"]
    return options + ([] if min_spans is None else ["--backpressure-min-spans", str(min_spans)])


@contextmanager
def _receivers(
    url: str, count: int, *, workers: int, assemblers: int, options: list[str] | None = None
) -> Iterator[tuple[list[int], list[int]]]:
    """``count`` ``steplog serve`` processes on one store, each on a port of its own, as several
    hosts behind a load balancer would be; yields their ports and process ids, stops them all
    afterwards."""
    servers: list[subprocess.Popen[str]] = []
    ports: list[int] = []
    try:
        for _ in range(count):
            port = free_port()
            flags = ["--port", str(port), "--workers", str(workers)]
            flags += ["--assemblers", str(assemblers), *(options or [])]
            server = subprocess.Popen(
                [sys.executable, "-m", "steplog.cli", "serve", "--db", url, *flags],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            servers.append(server)
            assert server.stdout is not None
            banner = server.stdout.readline()
            if "/v1/traces" not in banner:
                raise RuntimeError(f"steplog serve did not start: {banner}{server.stderr}")
            ports.append(port)
        yield ports, [server.pid for server in servers]
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.communicate(timeout=60)


def _last_position(url: str) -> int:
    store = EventStore.open(url)
    try:
        return store.last_position()
    finally:
        store.close()


BENCH_SCHEMA = "steplog_bench_ingest"
"""The PostgreSQL schema a benchmark runs in (this process's id appended)."""


@contextmanager
def _fresh_store(db: str | None, folder: Path) -> Iterator[str]:
    """A fresh, migrated store: a SQLite file in ``folder``, or a schema of its own
    (:data:`BENCH_SCHEMA`) in the PostgreSQL database of ``db``, dropped afterwards."""
    if db is None or not db.startswith("postgresql"):
        from ..store import resolve_url

        url = resolve_url(db) if db else f"sqlite:///{folder / 'ingest.db'}"
        EventStore.open(url).close()
        yield url
        return
    from sqlalchemy import make_url, text

    from ..store import create_engine_for, upgrade, with_schema

    database = make_url(db).difference_update_query(["options"])  # a search_path of its own
    base = database.render_as_string(hide_password=False)
    schema = f"{BENCH_SCHEMA}_{os.getpid()}"
    admin = create_engine_for(base)

    def drop() -> None:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))

    try:
        drop()
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = with_schema(base, schema)
        engine = create_engine_for(url)
        try:
            upgrade(engine)
        finally:
            engine.dispose()
        yield url
    finally:
        drop()
        admin.dispose()


class _RunWatcher(threading.Thread):
    """Polls the store for runs that ended (their terminal event is stored) and notes when each
    was first seen: a cheap query on two columns, not a read of the events."""

    def __init__(self, url: str, every: float = 0.2, *, after: int = 0) -> None:
        super().__init__(daemon=True)
        self.url, self.every, self.after = url, every, after
        self.seen_at: dict[str, float] = {}
        self._stopping = threading.Event()

    def run(self) -> None:
        from sqlalchemy import func, select

        from ..models import events_table
        from ..store import create_engine_for

        t = events_table.c
        engine = create_engine_for(self.url)
        after = self.after
        try:
            while True:
                stopping = self._stopping.is_set()
                with engine.connect() as conn:
                    # bounded on both sides: a fresh PostgreSQL store has no statistics yet,
                    # and ``position > after`` alone is planned as a scan of the whole log,
                    # ~1 core's worth of the server at 10,000 spans/s taken from the receiver
                    last = conn.execute(select(func.max(t.position))).scalar() or after
                    rows = conn.execute(
                        select(t.position, t.run_id).where(
                            t.position > after,
                            t.position <= last,
                            t.type.in_(("RunCompleted", "RunFailed")),
                        )
                    ).all()
                now = time.perf_counter()
                for _position, run_id in rows:
                    self.seen_at.setdefault(run_id, now)
                after = max(after, last)  # positions up to ``last`` were all committed
                if stopping:
                    return
                self._stopping.wait(self.every)
        finally:
            engine.dispose()

    def stop_and_join(self) -> None:
        if self.is_alive():
            self._stopping.set()
            self.join()


def _wait_for_events(url: str, expected: int, *, stalled: float) -> int:
    """Wait until the store's last position reaches ``expected``, or until none was added for
    ``stalled`` seconds (a slow assembler is measured to the end; a stuck one is not waited
    for)."""
    store = EventStore.open(url)
    try:
        stored = store.last_position()
        progress_at = time.monotonic()
        while stored < expected and time.monotonic() - progress_at < stalled:
            time.sleep(0.25)
            now = store.last_position()
            if now > stored:
                stored, progress_at = now, time.monotonic()
        return stored
    finally:
        store.close()


_visibility_lags = visibility_lags  # the name the tests import
__all__ = [  # this module's names, and those of its parts imported from here
    "BENCH_SCHEMA",
    "SPANS_PER_REQUEST",
    "VISIBLE_WITHIN",
    "Found",
    "IngestBench",
    "build_requests",
    "events_per_trace",
    "find_sent",
    "run_ingest_benchmark",
    "steady_assembly_rate",
]
