"""Truthful health, backpressure and access (issues 38 and 39): /health says not ready, with the
reason, when writes fail, the SQLite lock is held, or the assembler keeps failing; the receiver
answers 503 + Retry-After while the staged backlog is over its bound and recovers after; off
loopback nothing is open without a token. Both engines where the store is involved."""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.otlp import agent_trace, request
from sqlalchemy import event
from typer.testing import CliRunner

from steplog.cli import app
from steplog.errors import SteplogError
from steplog.ingest.otlp.admission import Limits
from steplog.ingest.otlp.assembler import AssemblerThread
from steplog.ingest.otlp.backlog import Backpressure
from steplog.ingest.otlp.health import ASSEMBLER_FAILURES, WriteProbe
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.server import OtlpReceiver
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

TOKEN = "s3cret-token-for-tests-0123456789"


def start(store: EventStore, **options: Any) -> tuple[OtlpReceiver, threading.Thread]:
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    options.setdefault("assembler", "none")
    server = OtlpReceiver(("127.0.0.1", 0), ingest, **options)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    return server, thread


def stop(server: OtlpReceiver, thread: threading.Thread) -> None:
    server.shutdown()
    server.server_close()
    thread.join()


def call(
    server: OtlpReceiver, path: str, body: bytes | None = None, **headers: str
) -> tuple[int, Any, Any]:
    host, port = server.server_address[:2]
    req = urllib.request.Request(
        f"http://{host}:{port}{path}",
        data=body,
        headers={"Content-Type": "application/json", **headers} if body is not None else headers,
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}"), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}"), exc.headers


def trace(seed: int) -> bytes:
    return json.dumps(request(*agent_trace(random.Random(seed), instance=f"i{seed}"))).encode()


# --- health: writes that fail -----------------------------------------------------------------


@pytest.fixture
def unwritable(store_url: str, tmp_path: Any) -> Iterator[EventStore]:
    """The test store, opened so that every write fails: SQLite full (no page may be added),
    PostgreSQL read-only."""
    store = EventStore.open(store_url)
    if store_url.startswith("sqlite"):

        @event.listens_for(store.engine, "connect")
        def full(dbapi_connection: sqlite3.Connection, _record: object) -> None:
            used = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
            dbapi_connection.execute(f"PRAGMA max_page_count = {used}")

    else:

        @event.listens_for(store.engine, "connect")
        def read_only(dbapi_connection: Any, _record: object) -> None:
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SET default_transaction_read_only = on")
            dbapi_connection.commit()

    store.engine.dispose()
    yield store
    store.close()


def test_health_is_not_ready_while_writes_fail(unwritable: EventStore) -> None:
    server, thread = start(unwritable)
    try:
        big = json.loads(trace(1))
        big["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"].append(
            {"key": "input.value", "value": {"stringValue": "lorem ipsum " * 2000}}
        )  # 24 KB: new pages (names are cut to a bounded length, values are not)
        for seed in range(2, 6):
            status, answer, headers = call(server, "/v1/traces", json.dumps(big).encode())
            big = json.loads(trace(seed))
            if status == 503:
                break
        assert status == 503 and headers["Retry-After"], answer
        status, report, _ = call(server, "/health")
        assert status == 503, report
        assert report["status"] != "ok"
        assert any("staging spans fails" in reason for reason in report["reasons"]), report
    finally:
        stop(server, thread)


def test_health_recovers_once_writes_succeed_again(store: EventStore) -> None:
    server, thread = start(store)
    try:
        server.writes.failed("staging spans", "database or disk is full")
        status, report, _ = call(server, "/health")
        assert status == 503 and "disk is full" in report["status"]
        assert call(server, "/v1/traces", trace(1))[0] == 200
        assert call(server, "/health")[0] == 200
    finally:
        stop(server, thread)


def test_a_read_only_postgresql_session_is_probed_without_writing(
    unwritable: EventStore, store_url: str
) -> None:
    if store_url.startswith("sqlite"):
        pytest.skip("the read-only probe of PostgreSQL")
    assert "read-only" in (WriteProbe(unwritable).problem() or "")


def test_a_read_only_sqlite_file_is_probed_without_writing(tmp_path: Any) -> None:
    path = tmp_path / "ro.db"
    EventStore.open(f"sqlite:///{path}").close()
    store = EventStore.open(f"sqlite:///file:{path}?mode=ro&uri=true")
    try:
        assert "read-only" in (WriteProbe(store).problem() or "")
    finally:
        store.close()


def test_a_sqlite_lock_held_past_the_bound_makes_the_receiver_not_ready(tmp_path: Any) -> None:
    path = tmp_path / "locked.db"
    store = EventStore.open(f"sqlite:///{path}")
    server, thread = start(store)
    server.probe = WriteProbe(store, lock_seconds=0.5)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        assert call(server, "/health")[0] == 200
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        answers = []
        while time.monotonic() - started < 10:
            status, report, _ = call(server, "/health")
            answers.append(status)
            if status == 503:
                break
            time.sleep(0.2)
        assert answers[0] == 200 and answers[-1] == 503  # held briefly: a writer at work
        assert "write lock has been held" in report["status"], report
        holder.execute("ROLLBACK")
        time.sleep(1.1)  # the probe's cache
        assert call(server, "/health")[0] == 200
    finally:
        holder.close()
        stop(server, thread)
        store.close()


# --- health: an assembler that keeps failing ----------------------------------------------------


def test_an_assembler_failing_round_after_round_makes_the_receiver_not_ready(
    store: EventStore,
) -> None:
    def failing() -> int:
        raise SteplogError("the database said no")

    server, thread = start(store)
    server._assembler = AssemblerThread(failing, every=0.01)
    try:
        deadline = time.monotonic() + 30
        while server.assembler.failures < ASSEMBLER_FAILURES and time.monotonic() < deadline:  # type: ignore[union-attr]
            time.sleep(0.05)
        status, report, _ = call(server, "/health")
        assert status == 503, report
        assert "assembler failed" in report["status"] and "the database said no" in report["status"]
        assert report["assembler"]["failures_in_a_row"] >= ASSEMBLER_FAILURES
    finally:
        stop(server, thread)


def test_an_assembler_process_shares_its_failures_with_the_parent(store_url: str) -> None:
    from multiprocessing import get_context

    from steplog.ingest.otlp import assembler as module

    process = module.AssemblerProcess.__new__(module.AssemblerProcess)
    context = get_context("spawn")
    process._count = 2
    process._failures = context.RawArray("q", 2)
    process._errors = context.RawArray("c", 2 * module.ERROR_CHARS)
    process._failures[1] = 4
    text = b"could not write".ljust(module.ERROR_CHARS, b"\0")
    process._errors[module.ERROR_CHARS : 2 * module.ERROR_CHARS] = text
    assert (process.failures, process.last_error) == (4, "could not write")


# --- backpressure ------------------------------------------------------------------------------


def test_spans_are_refused_while_the_backlog_is_over_its_bound_and_taken_after(
    store: EventStore,
) -> None:
    spans_per_trace = len(agent_trace(random.Random(1)))
    policy = Backpressure(seconds=60, min_spans=2 * spans_per_trace, interval=0)
    server, thread = start(store, backpressure=policy)
    try:
        for seed in (1, 2, 3):  # the look before the third sees 2 traces: at the bound
            assert call(server, "/v1/traces", trace(seed))[0] == 200
        status, answer, headers = call(server, "/v1/traces", trace(4))
        assert status == 503 and headers["Retry-After"], answer
        assert "staged backlog" in answer["message"] and "over its bound" in answer["message"]
        status, report, _ = call(server, "/health")
        assert status == 200  # busy, not broken
        backlog = report["backlog"]
        assert backlog["spans"] == 3 * spans_per_trace and backlog["pushing_back"] is True
        assert backlog["oldest_seconds"] is not None and backlog["oldest_seconds"] >= 0
        assert server.stats.refused_backlog == 1
        server.ingest.assemble(everything=True)  # the assemblers catch up
        assert call(server, "/v1/traces", trace(4))[0] == 200
        assert call(server, "/health")[1]["backlog"]["pushing_back"] is False
    finally:
        stop(server, thread)


def test_the_bound_follows_the_assembly_rate() -> None:
    from steplog.ingest.otlp.backlog import BacklogMonitor

    now = [0.0]
    staged = [0]
    inflow = [0]
    monitor = BacklogMonitor(
        object(),  # type: ignore[arg-type]  # (the count below is made up)
        Backpressure(seconds=10, min_spans=100, interval=1),
        lambda: inflow[0],
        clock=lambda: now[0],
    )
    import steplog.ingest.otlp.backlog as backlog

    real = backlog.staged_count
    backlog.staged_count = lambda store, cap: min(staged[0], cap)  # type: ignore[assignment]
    try:
        for _ in range(60):  # 1,000 spans/s in, all assembled: a steady state
            now[0] += 1
            inflow[0] += 1000
            monitor.look()
        assert 900 < monitor.state.rate <= 1000
        assert monitor.state.bound == int(monitor.state.rate * 10)
        staged[0] = 12_000  # the assemblers stall: over 10 s of input waits
        now[0] += 1
        assert monitor.refusal() is not None
        staged[0] = 9_500  # draining (which raises the rate), not yet below 80 % of the bound
        now[0] += 1
        assert monitor.refusal() is not None
        staged[0] = 5_000
        now[0] += 1
        assert monitor.refusal() is None
    finally:
        backlog.staged_count = real  # type: ignore[assignment]


# --- access -------------------------------------------------------------------------------------


def test_with_a_token_every_request_needs_it(store: EventStore) -> None:
    server, thread = start(store, token=TOKEN)
    try:
        status, answer, headers = call(server, "/v1/traces", trace(1))
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert "OTEL_EXPORTER_OTLP_HEADERS" in answer["message"]
        assert call(server, "/v1/traces", trace(1), Authorization="Bearer wrong")[0] == 401
        assert call(server, "/v1/traces", trace(1), Authorization=f"Basic {TOKEN}")[0] == 401
        assert call(server, "/v1/traces", trace(1), Authorization=f"Bearer {TOKEN}")[0] == 200
        assert server.ingest.pending()[0] == 1
        status, report, _ = call(server, "/health")
        assert (status, report) == (200, {"status": "ok"})  # no figures without the token
        status, report, _ = call(server, "/health", Authorization=f"Bearer {TOKEN}")
        assert status == 200 and report["staged"]["traces"] == 1
    finally:
        stop(server, thread)


def test_the_exporters_header_variable_carries_the_token(store: EventStore) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    import os

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    server, thread = start(store, token=TOKEN)
    host, port = server.server_address[:2]
    os.environ["OTEL_EXPORTER_OTLP_HEADERS"] = f"Authorization=Bearer%20{TOKEN}"
    try:
        exporter = OTLPSpanExporter(endpoint=f"http://{host}:{port}/v1/traces")
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        with provider.get_tracer("t").start_as_current_span("invoke_agent a"):
            pass
        provider.shutdown()
        assert server.stats.spans_accepted == 1 and server.stats.unauthorized == 0
    finally:
        del os.environ["OTEL_EXPORTER_OTLP_HEADERS"]
        stop(server, thread)


def test_grpc_needs_the_token_in_its_metadata(store: EventStore) -> None:
    grpc = pytest.importorskip("grpc")
    from steplog.ingest.otlp.grpc_server import GrpcReceiver

    server, thread = start(store, token=TOKEN)
    rpc = GrpcReceiver(server, "127.0.0.1", 0)
    try:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        with grpc.insecure_channel(f"127.0.0.1:{rpc.port}") as channel:
            export = channel.unary_unary(
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                request_serializer=None,
                response_deserializer=ExportTraceServiceResponse.FromString,
            )
            body = ExportTraceServiceRequest().SerializeToString()
            with pytest.raises(grpc.RpcError) as refused:
                export(body, timeout=30)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            export(body, timeout=30, metadata=[("authorization", f"Bearer {TOKEN}")])
    finally:
        rpc.stop()
        stop(server, thread)


runner = CliRunner()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20"])
def test_serve_off_loopback_refuses_to_start_without_a_token(
    host: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STEPLOG_TOKEN", raising=False)
    result = runner.invoke(app, ["serve", "--host", host, "--db", f"sqlite:///{tmp_path}/s.db"])
    assert result.exit_code == 1
    assert "needs a bearer token" in result.stderr and "--token" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s.db").exists()  # refused before anything was opened


def test_a_short_token_is_refused(tmp_path: Any) -> None:
    result = runner.invoke(app, ["serve", "--token", "short", "--db", f"sqlite:///{tmp_path}/s.db"])
    assert result.exit_code == 1 and "at least 16" in result.stderr


# --- steplog status ----------------------------------------------------------------------------


def test_status_reports_the_backlog_and_a_receivers_health(
    store: EventStore, store_url: str
) -> None:
    server, thread = start(store, token=TOKEN)
    try:
        call(server, "/v1/traces", trace(1), Authorization=f"Bearer {TOKEN}")
        url = "http://{}:{}".format(*server.server_address[:2])
        result = runner.invoke(
            app, ["status", "--db", store_url, "--receiver", url, "--token", TOKEN, "--json"]
        )
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["status"] == "ok"
        assert report["staged"]["traces"] == 1 and report["staged"]["oldest_seconds"] >= 0
        assert report["receiver"]["backlog"]["pushing_back"] is False
        server.writes.failed("staging spans", "database or disk is full")
        result = runner.invoke(
            app, ["status", "--db", store_url, "--receiver", url, "--token", TOKEN]
        )
        assert result.exit_code == 1
        assert "not ready" in result.stdout and "disk is full" in result.stdout
    finally:
        stop(server, thread)


def test_status_without_a_receiver_running_checks_the_store_alone(
    store_url: str, store: EventStore
) -> None:
    result = runner.invoke(
        app, ["status", "--db", store_url, "--receiver", "http://127.0.0.1:9", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["receiver"] == "not running" and report["staged"]["spans"] == 0


def test_health_limits_are_reported(store: EventStore) -> None:
    server, thread = start(store, limits=Limits(max_requests=7))
    try:
        report = call(server, "/health")[1]
        assert report["inflight"]["limits"]["max_requests"] == 7
        assert report["inflight"]["requests"] == 0
    finally:
        stop(server, thread)


def test_grpc_keeps_the_bounds_of_the_http_door(store: EventStore) -> None:
    grpc = pytest.importorskip("grpc")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    from steplog.ingest.otlp.grpc_server import GrpcReceiver

    policy = Backpressure(seconds=60, min_spans=1, interval=0)
    server, thread = start(store, limits=Limits(max_values=1000), backpressure=policy)
    rpc = GrpcReceiver(server, "127.0.0.1", 0)
    try:
        pb = ExportTraceServiceRequest()
        span = pb.resource_spans.add().scope_spans.add().spans.add()
        span.trace_id, span.span_id, span.name = bytes(range(1, 17)), bytes([1] * 8), "x"
        span.start_time_unix_nano, span.end_time_unix_nano = 10, 20
        for n in range(1500):
            attribute = span.attributes.add()
            attribute.key, attribute.value.int_value = f"k{n}", n
        with grpc.insecure_channel(f"127.0.0.1:{rpc.port}") as channel:
            export = channel.unary_unary(
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                request_serializer=None,
                response_deserializer=ExportTraceServiceResponse.FromString,
            )
            with pytest.raises(grpc.RpcError) as too_many:
                export(pb.SerializeToString(), timeout=30)
            assert too_many.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "attribute values" in too_many.value.details()
            del span.attributes[:]
            for span_id in (1, 2):  # staged: the backlog is then over its bound of 1
                span.span_id = bytes([span_id] * 8)
                export(pb.SerializeToString(), timeout=30)
            with pytest.raises(grpc.RpcError) as backlog:
                export(pb.SerializeToString(), timeout=30)
            assert backlog.value.code() == grpc.StatusCode.UNAVAILABLE  # retried by exporters
            assert "staged backlog" in backlog.value.details()
    finally:
        rpc.stop()
        stop(server, thread)


@pytest.mark.parametrize("allow", [False, True])
def test_the_ui_says_at_start_up_whether_replays_are_allowed(
    allow: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import steplog.cli.ui_cmds as ui_cmds

    started: dict[str, Any] = {}

    class FakeStreamlit:
        def __init__(self, command: list[str], env: dict[str, str]) -> None:
            started["env"] = env

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(ui_cmds.subprocess, "Popen", FakeStreamlit)
    args = ["ui", "--db", f"sqlite:///{tmp_path}/s.db", "--port", "8599"]
    EventStore.open(f"sqlite:///{tmp_path}/s.db").close()
    result = runner.invoke(app, args + (["--allow-replays"] if allow else []))
    assert result.exit_code == 0, result.output
    if allow:
        assert "replays: allowed" in result.stdout
    else:
        assert "the UI is read-only" in result.stdout and "--allow-replays" in result.stdout
    assert started["env"]["STEPLOG_UI_ALLOW_REPLAYS"] == ("1" if allow else "")
