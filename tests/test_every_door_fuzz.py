"""Every door, fuzzed with structural mutations (hypothesis): whatever a file or a request holds,
the door stores it, quarantines it or refuses it with a message -- no exception escapes,
nothing stays staged, and the store's readers still work afterwards.

The mutations are the ones real inputs have: a value replaced by a huge string, an extreme or
non-finite number, a deep nesting, the wrong type, an element duplicated (duplicate ids, cycles
of references), a field removed, bytes that are not UTF-8. Each door starts from a valid input
of its own format (an OpenAI-style conversation, a mini-swe-agent trajectory, an Inspect log,
an OTLP request; the gRPC door with the same request as protobuf) so the mutations reach deep
into the importer, not only its first check. ``test_ingest_fuzz`` covers the JSONL and OTLP
decoders on their own, ``test_boundary_assembly`` random span graphs.
"""

from __future__ import annotations

import copy
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.otlp import agent_trace, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from steplog.cli import app
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.redaction import default_redactor
from steplog.projections.queries import list_failures, list_runs, refresh
from steplog.store import EventStore

runner = CliRunner()


def conversation() -> dict[str, Any]:
    call = {
        "id": "t1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"city": "Paris"}'},
    }
    return {
        "id": "c1",
        "scenario": "travel",
        "model": "m-1",
        "messages": [
            {"role": "system", "content": "You plan trips."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call],
                "usage": {"prompt_tokens": 40, "completion_tokens": 9},
            },
            {"role": "tool", "tool_call_id": "t1", "content": '{"sky": "sunny"}'},
            {"role": "assistant", "content": "Sunny."},
        ],
        "outcome": "success",
    }


def trajectory() -> dict[str, Any]:
    usage = {"usage": {"prompt_tokens": 50, "completion_tokens": 7}}
    return {
        "trajectory_format": "mini-swe-agent-1",
        "instance_id": "repo__issue-1",
        "info": {
            "exit_status": "Submitted",
            "submission": "diff",
            "model_stats": {"api_calls": 2, "instance_cost": 0.01},
        },
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Fix the bug."},
            {"role": "assistant", "content": "```bash\nls\n```", "extra": {"response": usage}},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>a.py</output>"},
            {
                "role": "assistant",
                "content": "```bash\necho done\n```",
                "extra": {"response": usage},
            },
        ],
    }


def inspect_log() -> dict[str, Any]:
    return {
        "version": 2,
        "status": "success",
        "eval": {
            "task": "weather",
            "model": "mockllm/model",
            "created": "2026-12-01T00:00:00Z",
            "dataset": {"samples": 1},
        },
        "samples": [
            {
                "id": 1,
                "epoch": 1,
                "input": "Weather in Paris?",
                "target": "sunny",
                "messages": conversation()["messages"],
                "output": {
                    "model": "mockllm/model",
                    "choices": [],
                    "usage": {"input_tokens": 40, "output_tokens": 9},
                },
                "scores": {"match": {"value": "C"}},
                "events": [],
            }
        ],
    }


def otlp_request() -> dict[str, Any]:
    return request(*agent_trace(random.Random(7), fail_tool=True))


SEEDS = {
    "messages": conversation,
    "mini-swe-agent": trajectory,
    "inspect": inspect_log,
    "otlp": otlp_request,
}


# --- structural mutations ----------------------------------------------------------------------

REPLACEMENTS = st.one_of(
    st.just("x" * 200_000),  # a huge string
    st.sampled_from([1e308, -1e308, 2**70, -(2**70), float("nan"), float("inf"), -0.0]),
    st.builds(lambda depth: json.loads("[" * depth + "]" * depth), st.integers(50, 400)),
    st.sampled_from([None, True, [], {}, "", "null", '{"role": "tool"}', 0]),
    st.text(max_size=20),
)


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _nodes(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _nodes(child, (*path, index))


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


@st.composite
def mutated(draw: st.DrawFn, seed: Any) -> Any:
    doc = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _nodes(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        action = draw(st.sampled_from(["replace", "remove", "duplicate"]))
        if action == "replace":
            parent[path[-1]] = draw(REPLACEMENTS)
        elif action == "remove":
            del parent[path[-1]]
        elif isinstance(parent, list):  # a repeated element: duplicate ids, repeated spans
            parent.append(copy.deepcopy(parent[path[-1]]))
        else:
            parent[f"{path[-1]}"] = copy.deepcopy(parent[path[-1]])
    return doc


def _encoded(doc: Any, bad_bytes: bool) -> bytes:
    data = json.dumps(doc).encode()  # NaN and Infinity as Python writes them: not JSON
    return data[: len(data) // 2] + b"\xff\xfe\xc3" + data[len(data) // 2 :] if bad_bytes else data


def _base64_ids(doc: Any) -> Any:
    """An OTLP/JSON request's hex ids as protobuf's JSON mapping wants them (base64)."""
    import base64

    doc = copy.deepcopy(doc)
    for resource in doc["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if isinstance(span.get(key), str) and span[key]:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return doc


def _readers_work(url: str) -> None:
    store = EventStore.open(url)
    try:
        refresh(store)
        for summary in list_runs(store, limit=50):
            list(store.read_run(summary.run_id))
        list_failures(store, limit=50)
        with store.engine.connect() as conn:
            staged = conn.exec_driver_sql("SELECT count(*) FROM otlp_spans").scalar()
        assert staged == 0, "spans left staged"
    finally:
        store.close()


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("doors") / "template.db"
    EventStore.open(f"sqlite:///{path}").close()
    return path


@pytest.mark.parametrize("door", sorted(SEEDS))
def test_every_file_door_stores_quarantines_or_refuses(
    door: str, migrated: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    seed = SEEDS[door]()

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(doc=mutated(seed), bad_bytes=st.booleans())
    def check(doc: Any, bad_bytes: bool) -> None:
        folder = tmp_path_factory.mktemp(door)
        db = folder / "store.db"
        db.write_bytes(migrated.read_bytes())
        path = folder / "input.json"
        path.write_bytes(_encoded(doc, bad_bytes))
        argv = ["import", door, str(path), "--db", f"sqlite:///{db}"]
        if door == "messages":
            argv += ["--model", "m-1"]
        result = runner.invoke(app, argv)
        assert result.exit_code in (0, 1), result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            f"{door}: {type(result.exception).__name__}: {result.exception}"
        )
        message = result.stdout + (result.stderr or "")
        assert "Traceback" not in message
        if result.exit_code == 1:
            assert message.strip(), "a refusal must say why"
        _readers_work(f"sqlite:///{db}")

    check()


def test_the_grpc_door_stores_quarantines_or_refuses(tmp_path: Path) -> None:
    """The same mutations, as protobuf over a real gRPC channel: every answer is OK (with
    ``partial_success`` naming what was rejected) or a status the exporter understands --
    never ``UNKNOWN``, which is what an escaping exception becomes."""
    grpc = pytest.importorskip("grpc")
    from google.protobuf.json_format import ParseDict, ParseError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    from steplog.ingest.otlp.grpc_server import GrpcReceiver
    from steplog.ingest.otlp.server import OtlpReceiver

    url = f"sqlite:///{tmp_path}/store.db"
    store = EventStore.open(url)
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    http = OtlpReceiver(("127.0.0.1", 0), ingest, assemble_every=0.05, max_body_bytes=1 << 22)
    thread = threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    rpc = GrpcReceiver(http, "127.0.0.1", 0)
    fine = {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAVAILABLE,
    }
    seen: list[str] = []
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{rpc.port}")
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )

        valid = ParseDict(_base64_ids(otlp_request()), ExportTraceServiceRequest())
        export(valid.SerializeToString(), timeout=30)  # a whole request is stored, between all

        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
        @given(doc=mutated(otlp_request()), cut=st.integers(0, 64))
        def check(doc: Any, cut: int) -> None:
            try:
                body = ParseDict(_base64_ids(doc), ExportTraceServiceRequest()).SerializeToString()
            except (
                ParseError,
                ValueError,
                TypeError,
                KeyError,
                IndexError,
                AttributeError,
                OverflowError,
                RecursionError,
            ):
                body = json.dumps(doc, default=str).encode()  # not protobuf at all
            if cut:
                body = body[:-cut] if len(body) > cut else body
            try:
                export(body, timeout=30)
                seen.append("ok")
            except grpc.RpcError as exc:
                assert exc.code() in fine, f"{exc.code()}: {exc.details()}"
                seen.append(exc.code().name)

        check()
        channel.close()
        ingest.assemble(everything=True)
    finally:
        rpc.stop()
        http.shutdown()
        http.server_close()
        thread.join()
        store.close()
    assert len(seen) >= 10
    _readers_work(url)
    store = EventStore.open(url)
    try:
        refresh(store)
        assert list_runs(store, limit=5), "the whole request became a run"
    finally:
        store.close()
