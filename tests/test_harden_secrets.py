"""Secrets are never persisted (issue 21, item 2): nine kinds of secret go through every door, good
and bad input alike, and then the whole database file is searched for them byte by byte.

The quarantine used to keep malformed protobuf as base64 and broken gzip bodies as raw bytes, and
``import jsonl`` stored payloads verbatim: every planted secret was recoverable.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers.otlp import agent_trace, attrs, request
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from steplog.ingest.jsonl import import_jsonl
from steplog.ingest.otlp.files import read_documents
from steplog.ingest.otlp.pipeline import OtlpIngest, import_documents
from steplog.ingest.otlp.server import OtlpReceiver
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

# the part of each that must never be stored (each assembled, so this file holds no live token)
SECRETS = {
    "openai": "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0KLMN",
    "anthropic": "sk-ant-api03-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2",
    "github": "ghp_" + "0123456789abcdefghijABCDEFGHIJklmnop",
    "aws": "AKIA" + "IOSFODNN7EXAMPL2",
    "slack": "xoxb-" + "1234567890-abcdefghijkl",
    "jwt": "eyJhbGciOiJIUzI1NiJ9"
    + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    + ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9P",
    "db_password": "Tr0ub4dor" + "-and-3",
    "basic_auth": "dXNlcjpo" + "dW50ZXIyMg==",
    "bearer": "abcDEF123" + "456ghiJKL789",
}


def leaky_text() -> str:
    """Prose an agent might log, with every secret in the form it is usually seen."""
    s = SECRETS
    return (
        f"keys {s['openai']} and {s['anthropic']}; token {s['github']}; aws {s['aws']}; "
        f"slack {s['slack']}; jwt {s['jwt']}; db postgresql://app:{s['db_password']}@db/prod; "
        f"Authorization: Basic {s['basic_auth']}; Authorization: Bearer {s['bearer']}"
    )


def leaky_request(seed: int) -> dict[str, object]:
    spans = agent_trace(random.Random(seed), instance=f"secret-{seed}")
    for span in spans:
        span["attributes"] += attrs(input__value=leaky_text(), note=leaky_text())
    return request(*spans)


def post(server: OtlpReceiver, body: bytes, content_type: str, encoding: str | None = None) -> int:
    host, port = server.server_address[:2]
    headers = {"Content-Type": content_type}
    if encoding:
        headers["Content-Encoding"] = encoding
    req = urllib.request.Request(f"http://{host}:{port}/v1/traces", data=body, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _protobuf(document: dict[str, object]) -> bytes:
    from google.protobuf.json_format import ParseDict

    return ParseDict(document, ExportTraceServiceRequest()).SerializeToString()


def _through_the_receiver(store: EventStore) -> None:
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    server = OtlpReceiver(("127.0.0.1", 0), ingest, assembler="none")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        good = json.dumps(leaky_request(1)).encode()
        assert post(server, good, "application/json") == 200
        assert post(server, _protobuf(leaky_request(2)), "application/x-protobuf") == 200
        assert post(server, gzip.compress(good), "application/json", "gzip") == 200
        # undecodable: malformed protobuf, broken gzip, broken JSON, deflate of garbage
        pb = _protobuf(leaky_request(3))
        assert post(server, pb[:-7] + b"\xff\xff", "application/x-protobuf") == 400
        assert post(server, gzip.compress(good)[:-20], "application/json", "gzip") == 400
        assert post(server, good[:-3] + b"!!", "application/json") == 400
        assert post(server, leaky_text().encode(), "application/x-protobuf", "deflate") == 400
        # decodable with a bad span (not UTF-8), and a conflicting re-send
        bad_span = _protobuf(leaky_request(4)).replace(b"invoke_agent", b"invoke_\xffgent", 1)
        assert post(server, bad_span, "application/x-protobuf") == 200
        changed = leaky_request(1)
        changed["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] = "other"  # type: ignore[index]
        assert post(server, json.dumps(changed).encode(), "application/json") == 200
        assert post(server, base64.b64encode(pb), "application/x-protobuf") == 400
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    ingest.assemble(everything=True)


def _through_the_importers(store: EventStore, folder: Path) -> None:
    text = leaky_text()
    events = folder / "events.jsonl"
    good = {
        "run_id": "jsonl-run",
        "type": "StepStarted",
        "payload": {"step": text, "step_index": 0},
    }
    events.write_text(
        "\n".join(
            [
                json.dumps(good),
                json.dumps({**good, "type": "NoSuchEvent"}),  # quarantined: unknown type
                json.dumps({**good, "payload": {"step": text, "step_index": "x"}}),  # invalid
                text,  # not JSON at all
                json.dumps({"run_id": "jsonl-run", "payload": [[[[text]]]] * 2}) + "[" * 300,
            ]
        )
        + "\n"
    )
    import_jsonl(store, events)
    capture = folder / "capture.jsonl"
    capture.write_text(
        "\n".join([json.dumps(leaky_request(5)), json.dumps(leaky_request(6))[:-9], text]) + "\n"
    )
    ingest = OtlpIngest(store, default_redactor(), source=f"otlp:{capture}")
    import_documents(ingest, read_documents(capture))


def test_no_planted_secret_reaches_the_database_file(tmp_path: Path) -> None:
    path = tmp_path / "secrets.db"
    store = EventStore.open(f"sqlite:///{path}")
    try:
        _through_the_receiver(store)
        _through_the_importers(store, tmp_path)
        assert store.count_quarantined() >= 9  # every bad door was taken
        assert store.last_position() > 0
    finally:
        store.close()
    files = [p for p in tmp_path.iterdir() if p.name.startswith("secrets.db")]
    stored = b"".join(p.read_bytes() for p in files)
    assert b"[REDACTED]" in stored  # the secrets were seen, and replaced
    found = {
        kind: secret
        for kind, secret in SECRETS.items()
        if secret.encode() in stored
        or base64.b64encode(secret.encode())[:16] in stored
        or secret.encode().hex().encode() in stored
    }
    assert found == {}


def test_no_planted_secret_recorded_through_the_sdk_reaches_the_database_file(
    tmp_path: Path,
) -> None:
    """The SDK's door: the run's input, each step's output, summary and error, the run's
    output and its failure are redacted like every call (and a replay still compares equal)."""
    from steplog.recorder import record_run, register_agent, step, tool_call
    from steplog.replay import replay

    @tool_call("lookup")
    def lookup(query: str) -> str:
        return f"found {query}"

    @register_agent("leaky-agent")
    def agent(task: str) -> dict[str, str]:
        with step("echo") as s:
            s.output, s.summary = {"said": lookup(task)}, task
        return {"answer": task}

    path = tmp_path / "sdk.db"
    store = EventStore.open(f"sqlite:///{path}")
    try:
        with record_run("leaky", model_version="v1", agent="leaky-agent",
                        input={"task": leaky_text()}, store=store) as run:  # fmt: skip
            run.output = agent(leaky_text())
        with (
            pytest.raises(RuntimeError),
            record_run("leaky", model_version="v1", store=store),
            step("fail"),
        ):
            raise RuntimeError(leaky_text())
        assert replay(store, run.run_id).identical  # the replay's events are redacted alike
    finally:
        store.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("sdk.db"))
    assert b"[REDACTED]" in stored
    assert {kind for kind, secret in SECRETS.items() if secret.encode() in stored} == set()
