"""OTLP/gRPC (issue 13, item 5): the real opentelemetry-exporter-otlp-proto-grpc client against
``steplog serve --grpc-port``, with the acknowledgement rule of the HTTP receiver."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.children import reap, spawn
from helpers.otlp import agent_trace, request

from steplog.errors import DatabaseUnavailableError
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.server import OtlpReceiver
from steplog.ingest.redaction import default_redactor
from steplog.projections.queries import list_runs, refresh
from steplog.store import EventStore

grpc = pytest.importorskip("grpc")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")

from google.protobuf.json_format import ParseDict  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from steplog.ingest.otlp.grpc_server import GrpcReceiver  # noqa: E402

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def wait_for(condition: object, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"not reached within {seconds} s")
        time.sleep(0.05)


@pytest.fixture
def receivers(store: EventStore) -> Iterator[tuple[OtlpReceiver, GrpcReceiver]]:
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    http = OtlpReceiver(("127.0.0.1", 0), ingest, assemble_every=0.05, max_body_bytes=1 << 20)
    thread = threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    rpc = GrpcReceiver(http, "127.0.0.1", 0)
    yield http, rpc
    rpc.stop()
    http.shutdown()
    http.server_close()
    thread.join()


def protobuf(document: dict[str, object]) -> bytes:
    """An OTLP/JSON request (hex ids) as binary protobuf (ids as bytes)."""
    import base64
    import json

    text = json.dumps(document)
    doc = json.loads(text)
    for resource in doc["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()


def call(port: int, body: bytes) -> ExportTraceServiceResponse:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        export = channel.unary_unary(
            EXPORT,
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        return export(body, timeout=30)  # type: ignore[no-any-return]


def test_the_otlp_grpc_exporter_lands_runs(
    receivers: tuple[OtlpReceiver, GrpcReceiver], store: EventStore
) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

    http, rpc = receivers
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{rpc.port}", insecure=True)
    results: list[SpanExportResult] = []
    real_export = exporter.export

    def export(spans):  # type: ignore[no-untyped-def]
        results.append(real_export(spans))
        return results[-1]

    exporter.export = export  # type: ignore[method-assign]
    provider = TracerProvider(resource=Resource.create({"service.name": "grpc-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    for version in ("model-a", "model-b"):
        with (
            tracer.start_as_current_span(
                "invoke_agent planner",
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "steplog.task_instance_id": "t1",
                },
            ),
            tracer.start_as_current_span(
                f"chat {version}",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": version,
                    "gen_ai.usage.input_tokens": 12,
                    "gen_ai.usage.output_tokens": 3,
                },
            ),
        ):
            pass
    provider.shutdown()
    assert results and all(r == SpanExportResult.SUCCESS for r in results)
    assert http.stats.spans_accepted == 4  # acknowledged = committed (staged)
    wait_for(lambda: len({e.run_id for e in store.read_all()}) == 2)
    refresh(store)
    assert {r.model_version for r in list_runs(store)} == {"model-a", "model-b"}


def test_grpc_keeps_the_good_spans_of_a_request_with_a_bad_one(
    receivers: tuple[OtlpReceiver, GrpcReceiver], store: EventStore
) -> None:
    _, rpc = receivers
    body = protobuf(request(*agent_trace(random.Random(3))))
    body = body.replace(b"invoke_agent", b"invoke_\xffgent", 1)  # not UTF-8: one span
    response = call(rpc.port, body)
    assert response.partial_success.rejected_spans == 1
    assert "spans[2]" in response.partial_success.error_message
    assert OtlpIngest(store, default_redactor()).pending() == (1, 2)  # the two good spans
    with pytest.raises(grpc.RpcError) as raised:
        call(rpc.port, b"\xff\xff\xff not protobuf")
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_grpc_never_acknowledges_what_the_database_did_not_take(
    receivers: tuple[OtlpReceiver, GrpcReceiver], monkeypatch: pytest.MonkeyPatch
) -> None:
    http, rpc = receivers

    def down(decoded: object) -> object:
        raise DatabaseUnavailableError("the database is down")

    monkeypatch.setattr(http.ingest, "receive", down)
    with pytest.raises(grpc.RpcError) as raised:
        call(rpc.port, protobuf(request(*agent_trace(random.Random(4)))))
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE  # the exporter retries this
    too_big = b"\x0a" + b"\xff" * 3 + b"\x7f" + b"x" * (2 << 20)
    with pytest.raises(grpc.RpcError) as raised:
        call(rpc.port, too_big)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_grpc_port_from_the_command_line(tmp_path: Path) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    url = f"sqlite:///{tmp_path}/grpc.db"
    http_port, grpc_port = _free_port(), _free_port()
    serve = spawn(
        [
            *(sys.executable, "-m", "steplog.cli", "serve", "--db", url),
            *("--port", str(http_port), "--grpc-port", str(grpc_port), "--settle", "0"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        assert "/v1/traces" in serve.stdout.readline()
        assert f"OTLP/gRPC receiver on 127.0.0.1:{grpc_port}" in serve.stdout.readline()
        provider = TracerProvider()
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{grpc_port}", insecure=True)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        with provider.get_tracer("t").start_as_current_span(
            "chat m", attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
        ):
            pass
        provider.shutdown()

        def stored() -> bool:
            store = EventStore.open(url)
            try:
                return any(True for _ in store.read_all())
            finally:
                store.close()

        wait_for(stored)
    finally:
        serve.terminate()
        try:
            _, err = serve.communicate(timeout=60)
        finally:
            reap(serve)
    assert serve.returncode == 0, err
    assert "1 span(s) accepted" in err
