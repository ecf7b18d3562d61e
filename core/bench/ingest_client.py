"""The ingest benchmark's client: OTLP requests built ahead (gzip, 512 spans each, as the SDK's
batch processor sends them), sent at a fixed span rate over keep-alive connections, a request
pushed back (503 + ``Retry-After``) sent again after the delay it names, as OTLP exporters do;
a watcher of the receivers' staged backlog (``/health``); and the baseline it is all measured
against, a receiver that parses each request and discards it.
"""

from __future__ import annotations

import gzip
import http.client
import json
import random
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

SPANS_PER_REQUEST = 512

RETRY_FOR = 120.0
"""Seconds the client keeps sending a pushed-back request again before counting it failed (the
OTLP exporters' own retry budgets are of this order)."""


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
    pushed_back: int = 0  # 503 + Retry-After answers, each followed by the request sent again

    @property
    def spans_per_second(self) -> float:
        """Acknowledged spans per second of sending."""
        return self.spans_acknowledged / self.seconds if self.seconds else 0.0


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
    port: int | list[int],
    bodies: list[bytes],
    counts: list[int],
    rate: int,
    *,
    connections: int = 2,
) -> ClientResult:
    """Send ``bodies`` paced to ``rate`` spans/s over keep-alive connections; with several
    ports (receivers), connection ``i`` goes to port ``i mod n``, as a round-robin load
    balancer spreads connections."""
    ports = [port] if isinstance(port, int) else list(port)
    connections = max(connections, len(ports))
    schedule: list[float] = []
    at = 0.0
    for count in counts:
        schedule.append(at)
        at += count / rate
    lock = threading.Lock()
    next_index = 0
    acknowledged = failed = pushed_back = 0
    latencies: list[float] = []
    acknowledged_at: list[float | None] = [None] * len(bodies)
    start = time.perf_counter()

    def worker(port: int) -> None:
        nonlocal next_index, acknowledged, failed, pushed_back
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
            reconnected, waits = False, 0
            while True:
                status, retry_after = _post(conn, bodies[index])
                if status == 503 and retry_after is not None:
                    waits += 1  # pushed back: wait as told, then the same request again
                    if time.perf_counter() + retry_after - began > RETRY_FOR:
                        break
                    time.sleep(retry_after)
                    continue
                if status == 200 or reconnected:
                    break
                conn.close()  # one reconnect and retry, as exporters do
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                reconnected = True
            answered = time.perf_counter()
            with lock:
                latencies.append((answered - began) * 1000)
                pushed_back += waits
                if status == 200:
                    acknowledged += counts[index]
                    acknowledged_at[index] = answered
                else:
                    failed += 1
        conn.close()

    threads = [
        threading.Thread(target=worker, args=(ports[i % len(ports)],)) for i in range(connections)
    ]
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
        pushed_back,
    )


def _post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, float | None]:
    """The answer's status (0: none, the connection failed) and its ``Retry-After`` in seconds
    (``None``: absent or not a number of seconds)."""
    try:
        conn.request(
            "POST",
            "/v1/traces",
            body=body,
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
        )
        response = conn.getresponse()
        response.read()
        retry_after = response.getheader("Retry-After")
        try:
            seconds = float(retry_after) if retry_after is not None else None
        except ValueError:
            seconds = None
        return response.status, seconds
    except (OSError, http.client.HTTPException):
        return 0, None


class BacklogWatcher(threading.Thread):
    """Reads each receiver's ``/health`` every ``every`` seconds and keeps the largest staged
    backlog it reported and the bound it stood against then. (A receiver counts its backlog
    anyway, once a second; reading it costs one request.)
    """

    def __init__(self, ports: list[int], every: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.ports, self.every = ports, every
        self.largest: int | None = None
        self.bound_at_largest: int | None = None
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.is_set():
            for port in self.ports:
                backlog = _backlog_of(port)
                spans, bound = backlog.get("spans"), backlog.get("bound")
                if not isinstance(spans, int):
                    continue
                if self.largest is None or spans > self.largest:
                    self.largest = spans
                    self.bound_at_largest = bound if isinstance(bound, int) else None
            self._stopping.wait(self.every)

    def stop_and_join(self) -> None:
        if self.is_alive():
            self._stopping.set()
            self.join()


def _backlog_of(port: int) -> dict[str, object]:
    """The ``backlog`` section of a receiver's ``/health`` (empty: no answer or none in it)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/health")
        report = json.loads(conn.getresponse().read())
    except (OSError, http.client.HTTPException, ValueError):
        return {}
    finally:
        conn.close()
    backlog = report.get("backlog") if isinstance(report, dict) else None
    return backlog if isinstance(backlog, dict) else {}


def serve_discarding() -> None:
    """A receiver that parses requests as ``steplog serve`` does and discards them: the
    benchmark's baseline (run as ``python -c``; prints its port, stops on SIGTERM)."""
    import signal
    from typing import cast

    from ..ingest.otlp.backlog import Backpressure
    from ..ingest.otlp.pipeline import OtlpIngest, Received
    from ..ingest.otlp.server import OtlpReceiver
    from ..ingest.otlp.span_model import DecodedRequest

    class Discard:
        def receive(self, decoded: DecodedRequest) -> Received:
            return Received(accepted=len(decoded.spans), rejected=list(decoded.rejected))

    receiver = OtlpReceiver(
        ("127.0.0.1", 0),
        cast(OtlpIngest, Discard()),
        assembler="none",
        backpressure=Backpressure(seconds=0),  # nothing is staged: nothing to push back for
    )

    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=receiver.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    print(receiver.server_address[1], flush=True)
    try:
        receiver.serve_forever(poll_interval=0.1)
    finally:
        receiver.server_close()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure_baseline(bodies: list[bytes], counts: list[int]) -> ClientResult:
    """The same client and requests, unpaced, against :func:`serve_discarding` in its own
    process."""
    code = "from steplog.bench.ingest_client import serve_discarding; serve_discarding()"
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
