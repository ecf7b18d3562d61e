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

``db`` may be a PostgreSQL URL: the benchmark then runs in a fresh schema of that database
(``steplog_bench_ingest_PID``, dropped afterwards).
"""

from __future__ import annotations

import gzip
import http.client
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from ..store import EventStore

SPANS_PER_REQUEST = 512
VISIBLE_WITHIN = 10.0
"""Seconds after its last span was acknowledged by which a run must be visible."""


@dataclass(frozen=True, slots=True)
class ClientResult:
    """What one timed sending session achieved."""

    spans_sent: int
    spans_acknowledged: int
    requests: int
    failed_requests: int
    seconds: float
    latencies_ms: list[float]
    acknowledged_at: list[float | None]  # perf_counter time of each request's 200

    @property
    def spans_per_second(self) -> float:
        """Acknowledged spans per second of sending."""
        return self.spans_acknowledged / self.seconds if self.seconds else 0.0


@dataclass(frozen=True, slots=True)
class IngestBench:
    """The benchmark's report."""

    target_spans_per_second: int
    seconds: float
    spans_per_trace: int
    spans_sent: int
    spans_acknowledged: int
    spans_per_second: float
    baseline_spans_per_second: float
    p50_latency_ms: float
    p99_latency_ms: float
    failed_requests: int
    assembly_lag_seconds: float
    assembly_spans_per_second: float  # steady state: see steady_assembly_rate
    first_visible_seconds: float | None  # from the first send to the first run visible
    visible_p50_seconds: float | None  # None: no run was seen
    visible_p99_seconds: float | None
    visible_max_seconds: float | None  # None unless every run was seen
    engine: str
    traces_sent: int
    traces_found: int  # sent trace ids whose run holds every expected event
    events_expected: int  # of the traces sent
    events_found: int  # of the traces sent, looked up by run id
    spans_left_staged: int  # of the traces sent, never assembled
    assemblers: int
    store: str  # "fresh" or "existing: N events before"
    load_average: tuple[float, float]  # 1-minute load average before and after

    @property
    def events_missing(self) -> int:
        """Events of the traces sent that are not in their runs: must be 0."""
        return max(0, self.events_expected - self.events_found)

    @property
    def assembly_keeps_up(self) -> bool:
        """Every trace assembled whole, at >= 98% of the acknowledged rate in steady state
        (:func:`steady_assembly_rate`), each run visible within :data:`VISIBLE_WITHIN` seconds of
        its last span."""
        worst = self.visible_max_seconds
        return (
            self.traces_found == self.traces_sent
            and self.events_missing == 0
            and self.assembly_spans_per_second >= 0.98 * self.spans_per_second
            and worst is not None
            and worst <= VISIBLE_WITHIN
        )

    @property
    def keeps_up(self) -> bool:
        """Acknowledged within 2% of the target rate and assembly keeps up (nothing lost)."""
        fast_enough = self.spans_per_second >= 0.98 * self.target_spans_per_second
        return fast_enough and self.assembly_keeps_up

    @property
    def ratio(self) -> float:
        """Acknowledged spans/s over the parse-and-discard receiver's, same client."""
        return self.spans_per_second / self.baseline_spans_per_second

    @property
    def assembly_ratio(self) -> float:
        """Assembled spans/s over the parse-and-discard receiver's."""
        return self.assembly_spans_per_second / self.baseline_spans_per_second

    @property
    def conditions(self) -> str:
        """Cold or warm, and the machine's load."""
        before, after = self.load_average
        start = "cold (a new serve process" + (
            ", fresh store)" if self.store == "fresh" else f", {self.store})"
        )
        return f"{start}; load average {before:.1f} before, {after:.1f} after"

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form, with the verdict."""
        return asdict(self) | {
            "events_missing": self.events_missing,
            "keeps_up": self.keeps_up,
            "assembly_keeps_up": self.assembly_keeps_up,
            "ratio": self.ratio,
            "assembly_ratio": self.assembly_ratio,
            "conditions": self.conditions,
        }


def events_per_trace(spans_per_trace: int) -> int:
    """RunStarted, three events per child step (start, call, completion), RunCompleted."""
    return 2 + 3 * (spans_per_trace - 1)


def build_requests(
    traces: int, spans_per_trace: int, seed: int = 7
) -> tuple[list[bytes], list[int], list[str]]:
    """Gzipped protobuf requests holding ``traces`` whole traces, children before their root;
    the span count of each request; and the trace ids (hex) in the order sent."""
    rng = random.Random(seed)
    start = time.time_ns()
    spans: list[Span] = []
    trace_ids: list[str] = []
    for t in range(traces):
        trace_id = rng.getrandbits(128).to_bytes(16, "big")
        trace_ids.append(trace_id.hex())
        root_id = rng.getrandbits(64).to_bytes(8, "big")
        t0 = start + t * 1_000_000
        for child in range(spans_per_trace - 1):
            chat = child % 2 == 0
            attributes = (
                [_kv("gen_ai.operation.name", "chat"), _kv("gen_ai.request.model", "model-x"),
                 _kv("gen_ai.usage.input_tokens", 200), _kv("gen_ai.usage.output_tokens", 40)]
                if chat
                else [_kv("gen_ai.operation.name", "execute_tool"),
                      _kv("gen_ai.tool.name", "lookup"),
                      _kv("gen_ai.tool.call.arguments", '{"id": 42}')]
            )  # fmt: skip
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=rng.getrandbits(64).to_bytes(8, "big"),
                    parent_span_id=root_id,
                    name="chat model-x" if chat else "execute_tool lookup",
                    start_time_unix_nano=t0 + child * 1000 + 1,
                    end_time_unix_nano=t0 + child * 1000 + 900,
                    attributes=attributes,
                )
            )
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=root_id,
                name="invoke_agent bench",
                start_time_unix_nano=t0,
                end_time_unix_nano=t0 + spans_per_trace * 1000,
                attributes=[
                    _kv("gen_ai.operation.name", "invoke_agent"),
                    _kv("gen_ai.agent.name", "bench-agent"),
                    _kv("steplog.task_instance_id", f"task-{t % 100}"),
                ],
            )
        )
    bodies, counts = [], []
    for offset in range(0, len(spans), SPANS_PER_REQUEST):
        chunk = spans[offset : offset + SPANS_PER_REQUEST]
        request = ExportTraceServiceRequest(
            resource_spans=[
                ResourceSpans(
                    resource=Resource(attributes=[_kv("service.name", "bench")]),
                    scope_spans=[ScopeSpans(spans=chunk)],
                )
            ]
        )
        bodies.append(gzip.compress(request.SerializeToString(), compresslevel=1))
        counts.append(len(chunk))
    return bodies, counts, trace_ids


def _kv(key: str, value: str | int) -> KeyValue:
    typed = AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
    return KeyValue(key=key, value=typed)


def send_at_rate(
    port: int, bodies: list[bytes], counts: list[int], rate: int, *, connections: int = 2
) -> ClientResult:
    """Send ``bodies`` paced to ``rate`` spans/s over keep-alive connections."""
    schedule: list[float] = []
    at = 0.0
    for count in counts:
        schedule.append(at)
        at += count / rate
    lock = threading.Lock()
    next_index = 0
    acknowledged = failed = 0
    latencies: list[float] = []
    acknowledged_at: list[float | None] = [None] * len(bodies)
    start = time.perf_counter()

    def worker() -> None:
        nonlocal next_index, acknowledged, failed
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while True:
            with lock:
                index = next_index
                next_index += 1
            if index >= len(bodies):
                break
            delay = start + schedule[index] - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            began = time.perf_counter()
            ok = _post(conn, bodies[index])
            if not ok:  # one reconnect and retry, as exporters do
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                ok = _post(conn, bodies[index])
            answered = time.perf_counter()
            with lock:
                latencies.append((answered - began) * 1000)
                if ok:
                    acknowledged += counts[index]
                    acknowledged_at[index] = answered
                else:
                    failed += 1
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ClientResult(
        sum(counts),
        acknowledged,
        len(bodies),
        failed,
        time.perf_counter() - start,
        latencies,
        acknowledged_at,
    )


def _post(conn: http.client.HTTPConnection, body: bytes) -> bool:
    try:
        conn.request(
            "POST",
            "/v1/traces",
            body=body,
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
        )
        response = conn.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False


def serve_discarding() -> None:
    """A receiver that parses requests as ``steplog serve`` does and discards them: the
    benchmark's baseline (run as ``python -c``; prints its port, stops on SIGTERM)."""
    import signal
    from typing import cast

    from ..ingest.otlp.pipeline import OtlpIngest, Received
    from ..ingest.otlp.server import OtlpReceiver
    from ..ingest.otlp.spans import DecodedRequest

    class Discard:
        def receive(self, decoded: DecodedRequest) -> Received:
            return Received(accepted=len(decoded.spans), rejected=list(decoded.rejected))

    receiver = OtlpReceiver(("127.0.0.1", 0), cast(OtlpIngest, Discard()), assembler="none")

    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=receiver.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    print(receiver.server_address[1], flush=True)
    try:
        receiver.serve_forever(poll_interval=0.1)
    finally:
        receiver.server_close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure_baseline(bodies: list[bytes], counts: list[int]) -> ClientResult:
    """The same client and requests, unpaced, against :func:`serve_discarding` in its own
    process."""
    code = "from steplog.bench.ingest import serve_discarding; serve_discarding()"
    server = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the baseline receiver did not start: {line}")
        return send_at_rate(int(line), bodies, counts, 10**9)
    finally:
        server.terminate()
        server.communicate(timeout=30)


@dataclass(frozen=True, slots=True)
class Found:
    """What the store holds of the traces sent, looked up by id."""

    traces_found: int
    events_found: int
    spans_left_staged: int


def find_sent(url: str, trace_ids: list[str], events_each: int) -> Found:
    """Look every sent trace up by its run id: a trace is found when its run holds
    ``events_each`` events, the last of them terminal; spans of sent traces still staged are
    counted too. Other runs in the store are not counted."""
    from sqlalchemy import case, func, select

    from ..database import create_engine_for
    from ..ingest.otlp.genai import run_id_for
    from ..models import events_table, staged_spans_table

    e, s = events_table.c, staged_spans_table.c
    engine = create_engine_for(url)
    found = events = staged = 0
    terminal = ("RunCompleted", "RunFailed")
    try:
        with engine.connect() as conn:
            for start in range(0, len(trace_ids), 500):
                chunk = trace_ids[start : start + 500]
                runs = [run_id_for(t) for t in chunk]
                query = (
                    select(
                        e.run_id,
                        func.count(),
                        func.sum(case((e.type.in_(terminal), 1), else_=0)),
                    )
                    .where(e.run_id.in_(runs))
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
    return Found(found, events, staged)


def run_ingest_benchmark(
    *,
    rate: int = 10_000,
    seconds: float = 30.0,
    spans_per_trace: int = 10,
    db: str | None = None,
    workers: int = 1,
    assemblers: int = 1,
    progress: Callable[[str], None] = lambda message: None,
) -> IngestBench:
    """Measure the parse-and-discard receiver, then ``steplog serve``; watch runs appear; look
    up every trace sent."""
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
        port = _free_port()
        command = [sys.executable, "-m", "steplog.cli", "serve", "--db", url, "--port", str(port)]
        server = subprocess.Popen(
            [*command, "--workers", str(workers), "--assemblers", str(assemblers)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        watcher = _RunWatcher(url, after=before)
        try:
            assert server.stdout is not None
            banner = server.stdout.readline()
            if "/v1/traces" not in banner:
                raise RuntimeError(f"steplog serve did not start: {banner}{server.stderr}")
            watcher.start()
            progress(f"sending {sum(counts):,} spans at {rate:,}/s for {seconds:g} s")
            sending_started = time.perf_counter()
            result = send_at_rate(port, bodies, counts, rate)
            progress("waiting for the receiver to assemble every trace")
            lag_started = time.perf_counter()
            expected = traces * events_per_trace(spans_per_trace)
            _wait_for_events(url, before + expected, stalled=60.0)
            lag = time.perf_counter() - lag_started
            watcher.stop_and_join()
            found = find_sent(url, trace_ids, events_per_trace(spans_per_trace))
        finally:
            watcher.stop_and_join()
            server.terminate()
            server.communicate(timeout=60)
    visible = _visibility_lags(trace_ids, spans_per_trace, result.acknowledged_at, watcher.seen_at)
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
        p99_latency_ms=_percentile(result.latencies_ms, 0.99),
        failed_requests=result.failed_requests,
        assembly_lag_seconds=lag,
        assembly_spans_per_second=steady_assembly_rate(seen, spans_per_trace, sending_started),
        first_visible_seconds=min(seen) - sending_started if seen else None,
        visible_p50_seconds=statistics.median(visible) if visible else None,
        visible_p99_seconds=_percentile(visible, 0.99) if visible else None,
        visible_max_seconds=max(visible) if len(visible) == traces else None,
        engine="postgresql" if url.startswith("postgresql") else "sqlite",
        traces_sent=traces,
        traces_found=found.traces_found,
        events_expected=expected,
        events_found=found.events_found,
        spans_left_staged=found.spans_left_staged,
        assemblers=assemblers,
        store="fresh" if before == 0 else f"existing: {before:,} events before",
        load_average=(load_before, os.getloadavg()[0]),
    )


def steady_assembly_rate(visible_at: list[float], spans_per_trace: int, started: float) -> float:
    """Spans per second turned into runs in steady state, from the times runs became visible.

    The runs seen after the first moment any run was seen, over the seconds from that moment to
    the last run seen: if assembly keeps up, runs appear at the rate spans are sent, shifted by a
    constant delay (a trace is ready once its root has settled), and this is that rate; if it
    falls behind, the last runs appear late and the rate drops. (Runs appear in rounds: those of
    the first round are left out because the window opens when they appear.) When every run
    appeared at once there is no window: the spans of all of them over the seconds since
    ``started`` (the first send) -- a lower bound."""
    if not visible_at:
        return 0.0
    first, last = min(visible_at), max(visible_at)
    if last > first:
        after_first = sum(1 for at in visible_at if at > first)
        return after_first * spans_per_trace / (last - first)
    return len(visible_at) * spans_per_trace / (last - started) if last > started else 0.0


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
        from ..database import resolve_url

        url = resolve_url(db) if db else f"sqlite:///{folder / 'ingest.db'}"
        EventStore.open(url).close()
        yield url
        return
    from sqlalchemy import make_url, text

    from ..database import create_engine_for, upgrade, with_schema

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

        from ..database import create_engine_for
        from ..models import events_table

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


def _visibility_lags(
    trace_ids: list[str],
    spans_per_trace: int,
    acknowledged_at: list[float | None],
    seen_at: dict[str, float],
) -> list[float]:
    """For each run seen: seconds from the acknowledgement of the last of its spans (the latest
    200 among the requests holding them) to the run being visible."""
    lags = []
    for t, trace in enumerate(trace_ids):
        seen = seen_at.get(f"otel-{trace}")
        first = t * spans_per_trace // SPANS_PER_REQUEST
        last = ((t + 1) * spans_per_trace - 1) // SPANS_PER_REQUEST
        acks = acknowledged_at[first : last + 1]
        if seen is None or any(a is None for a in acks):
            continue
        lags.append(max(0.0, seen - max(a for a in acks if a is not None)))
    return lags


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


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0
