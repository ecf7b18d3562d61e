"""``steplog bench ingest``: can ``steplog serve`` keep up with a busy exporter, losing nothing?

A client in this process sends pre-encoded OTLP protobuf requests (gzip, 512 spans each, as the
SDK's batch processor does) at a fixed span rate for a fixed time to a ``steplog serve`` running
as a separate process on a fresh store. Every trace is an agent run of ``spans_per_trace`` spans
(an ``invoke_agent`` root over alternating ``chat`` and ``execute_tool`` children), so the
number of events each trace must become is known. After the last acknowledgement the benchmark
waits for the receiver to assemble everything, then counts what was stored.

Reported: spans acknowledged per second against the target rate, request latencies, how long
assembly lagged behind the last acknowledgement, and events missing (of acknowledged spans but
not stored: must be 0). The baseline is the same client against a receiver that decodes
nothing and stores nothing: the ratio shows how much of the client's capacity steplog sustains.
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
from collections.abc import Callable
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from ..store import EventStore

SPANS_PER_REQUEST = 512


@dataclass(frozen=True, slots=True)
class ClientResult:
    """What one timed sending session achieved."""

    spans_sent: int
    spans_acknowledged: int
    requests: int
    failed_requests: int
    seconds: float
    latencies_ms: list[float]

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
    traces_sent: int
    runs_stored: int
    events_stored: int
    events_expected: int

    @property
    def events_missing(self) -> int:
        """Events of acknowledged spans that never reached the store: must be 0."""
        return max(0, self.events_expected - self.events_stored)

    @property
    def keeps_up(self) -> bool:
        """Within 2% of the target rate, and nothing acknowledged was lost."""
        fast_enough = self.spans_per_second >= 0.98 * self.target_spans_per_second
        return fast_enough and self.events_missing == 0 and self.runs_stored == self.traces_sent

    @property
    def ratio(self) -> float:
        """steplog's sustained rate over the do-nothing receiver's, same client."""
        return self.spans_per_second / self.baseline_spans_per_second

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form, with the verdict."""
        return asdict(self) | {
            "events_missing": self.events_missing,
            "keeps_up": self.keeps_up,
            "ratio": self.ratio,
        }


def events_per_trace(spans_per_trace: int) -> int:
    """RunStarted, three events per child step (start, call, completion), RunCompleted."""
    return 2 + 3 * (spans_per_trace - 1)


def build_requests(
    traces: int, spans_per_trace: int, seed: int = 7
) -> tuple[list[bytes], list[int]]:
    """Gzipped protobuf requests holding ``traces`` whole traces, children before their root;
    and the span count of each request."""
    rng = random.Random(seed)
    start = time.time_ns()
    spans: list[Span] = []
    for t in range(traces):
        trace_id = rng.getrandbits(128).to_bytes(16, "big")
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
    return bodies, counts


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
            with lock:
                latencies.append((time.perf_counter() - began) * 1000)
                if ok:
                    acknowledged += counts[index]
                else:
                    failed += 1
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ClientResult(
        sum(counts), acknowledged, len(bodies), failed, time.perf_counter() - start, latencies
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


class _NullHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ingest_benchmark(
    *,
    rate: int = 10_000,
    seconds: float = 30.0,
    spans_per_trace: int = 10,
    db: str | None = None,
    workers: int = 1,
    progress: Callable[[str], None] = lambda message: None,
) -> IngestBench:
    """Measure the null receiver, then ``steplog serve``; count what was stored."""
    traces = max(1, int(rate * seconds) // spans_per_trace)
    progress(f"encoding {traces:,} traces of {spans_per_trace} spans")
    bodies, counts = build_requests(traces, spans_per_trace)

    progress("baseline: the same client against a receiver that stores nothing")
    null = ThreadingHTTPServer(("127.0.0.1", 0), _NullHandler)
    null.daemon_threads = True
    thread = threading.Thread(target=null.serve_forever, daemon=True)
    thread.start()
    try:
        baseline = send_at_rate(null.server_address[1], bodies, counts, rate * 10)
    finally:
        null.shutdown()
        null.server_close()

    with tempfile.TemporaryDirectory(prefix="steplog-bench-ingest-") as folder:
        url = db or f"sqlite:///{Path(folder) / 'ingest.db'}"
        EventStore.open(url).close()
        port = _free_port()
        command = [sys.executable, "-m", "steplog.cli", "serve", "--db", url]
        server = subprocess.Popen(
            [*command, "--port", str(port), "--workers", str(workers)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert server.stdout is not None
            banner = server.stdout.readline()
            if "/v1/traces" not in banner:
                raise RuntimeError(f"steplog serve did not start: {banner}{server.stderr}")
            progress(f"sending {sum(counts):,} spans at {rate:,}/s for {seconds:g} s")
            result = send_at_rate(port, bodies, counts, rate)
            progress("waiting for the receiver to assemble every trace")
            lag_started = time.perf_counter()
            expected = traces * events_per_trace(spans_per_trace)
            store = EventStore.open(url)
            try:
                events = _wait_for_events(store, expected, timeout=max(120.0, seconds * 4))
                lag = time.perf_counter() - lag_started
                runs = store.count_runs()
            finally:
                store.close()
        finally:
            server.terminate()
            server.communicate(timeout=60)
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
        traces_sent=traces,
        runs_stored=runs,
        events_stored=events,
        events_expected=expected,
    )


def _wait_for_events(store: EventStore, expected: int, *, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    stored = store.last_position()
    while stored < expected and time.monotonic() < deadline:
        time.sleep(0.25)
        stored = store.last_position()
    return stored


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0
