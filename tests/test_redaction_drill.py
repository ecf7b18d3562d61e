"""The redaction drill (issue 39): every kind of secret, in every field, through every door, on
both engines; then the database itself is searched: 0 planted secrets recoverable.

Doors: OTLP over HTTP as JSON and as protobuf, over gRPC, ``import otlp``, ``import jsonl``,
``import messages``, ``import mini-swe-agent`` and ``import inspect``; good input and bad (a span
that cannot be used, a body cut short or broken, a line that is not JSON, a record that cannot
be mapped). Fields: span, event and scope names, attribute keys and values (strings, arrays,
key-value lists, bytes, JSON inside strings with escapes), resource attributes, status and error
messages, tool arguments and results, file names. Secrets are planted as they are, base64
encoded and JSON-escaped, and values of keys that name a secret look like nothing at all.

What is searched: the SQLite database files byte for byte (or a ``pg_dump`` of the test's
schema), and besides, decompressed, the archived spans of every trace (``otlp_traces`` is
compressed, so a byte search alone would not see into it). Each secret is looked for raw,
JSON-escaped, hex-encoded and base64-encoded at each of the three alignments.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from helpers.otlp import agent_trace, request
from sqlalchemy.engine import make_url
from test_ingest_inspect import inspect_logs  # noqa: F401  (a fixture: the logs, once a session)

from steplog.bench.redact import EXAMPLES
from steplog.ingest.inspect import import_inspect
from steplog.ingest.jsonl import import_jsonl
from steplog.ingest.messages import import_messages
from steplog.ingest.mini_swe import conversation_of_trajectory, instance_of
from steplog.ingest.otlp import archive
from steplog.ingest.otlp.files import read_documents
from steplog.ingest.otlp.pipeline import OtlpIngest, import_documents
from steplog.ingest.otlp.server import OtlpReceiver
from steplog.redaction import builtin_redactor
from steplog.store import EventStore

CONTEXT = {
    "url_userinfo": "redis://:",
    "authorization_header": "Authorization: token ",
    "bearer_token": "Bearer ",
    "basic_auth": "Basic ",
    "cookie_header": "Cookie: ",
    "cli_secret_flag": "--password ",
    "cli_user_password": "mysql -u root -p ",
    "key_value": "AWS_SECRET_ACCESS_KEY=",
}
NAMED = {  # values of keys that name a secret: they look like nothing
    "api_key": "plainNamedValue0001",
    "password": "plainNamedValue0002",
    "http.request.header.authorization": "plainNamedValue0003",
    "cookie": "plainNamedValue0004",
    "SecretAccessKey": "plainNamedValue0005",
    "token": "plainNamedValue0006",
}


def secret_of(kind: str) -> str:
    example = EXAMPLES[kind]
    secret = example[len(CONTEXT.get(kind, "")) :]
    return secret.split("@")[0] if kind == "url_userinfo" else secret


SECRETS = {kind: secret_of(kind) for kind in EXAMPLES} | {
    f"named {key}": value for key, value in NAMED.items()
}
SECRETS["pem body line"] = "MIIEowIBAAKCAQEA7bq9"


def forms(secret: str) -> list[bytes]:
    """The ways a secret could sit in the store: raw, JSON-escaped, hex, base64 (three
    alignments, both alphabets; the part of the encoding that only the secret decides)."""
    raw = secret.encode()
    found = [raw, json.dumps(secret)[1:-1].encode(), raw.hex().encode()]
    for shift in range(3):
        encoded = base64.b64encode(b"x" * shift + raw)
        inner = encoded[4 : len(encoded) - 4]
        found += [inner, inner.translate(bytes.maketrans(b"+/", b"-_"))]
    return [form for form in found if len(form) >= 8]


def prose(seed: int) -> str:
    """Text an agent might log, every kind in it, some JSON-escaped."""
    rng = random.Random(seed)
    kinds = list(EXAMPLES)
    rng.shuffle(kinds)
    parts = [f"{kind}: {EXAMPLES[kind]}" for kind in kinds]
    escaped = "".join(f"\\u{ord(c):04x}" for c in EXAMPLES["openai_anthropic_key"])
    return "; ".join(parts) + f"; escaped {escaped}; token={NAMED['token']}"


def one_line(text: str) -> str:
    """``text`` as a log line holds it: line breaks escaped."""
    return text.replace("\n", "\\n")


def structured(seed: int) -> dict[str, Any]:
    """A JSON value with secret-named keys, secrets as keys, and JSON inside strings."""
    text = prose(seed)
    inner = json.dumps({"password": NAMED["password"], "note": text})
    return {
        **NAMED,
        EXAMPLES["github_token"]: "a secret as a key",
        "arguments": inner,
        "escaped": json.dumps({"k": EXAMPLES["jwt"]}, ensure_ascii=True).replace("e", "\\u0065"),
        "nested": {"list": [text, {"api_key": NAMED["api_key"]}]},
    }


# --- OTLP -------------------------------------------------------------------------------------


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    if isinstance(value, dict):
        return {
            "kvlistValue": {"values": [{"key": k, "value": _value(v)} for k, v in value.items()]}
        }
    return {"stringValue": str(value)}


def planted_request(seed: int) -> dict[str, Any]:
    """A good agent trace with a secret in every field, and a span that cannot be used."""
    rng = random.Random(seed)
    document = request(*agent_trace(rng, instance=f"drill-{seed}"))
    resource = document["resourceSpans"][0]
    resource["resource"]["attributes"] += [
        {"key": "host.note", "value": _value(prose(seed))},
        {"key": "deploy.api_key", "value": _value(NAMED["api_key"])},
    ]
    resource["scopeSpans"][0]["scope"] = {"name": EXAMPLES["slack_token"], "version": prose(seed)}
    kinds = list(EXAMPLES)
    for index, span in enumerate(resource["scopeSpans"][0]["spans"]):
        kind = kinds[(seed + index) % len(kinds)]
        span["name"] = f"{span['name']} {EXAMPLES[kind]}"
        span["status"] = {"code": 2, "message": prose(seed + index)}
        span["attributes"] += [
            {"key": "input.value", "value": _value(prose(seed + index))},
            {"key": "gen_ai.tool.call.arguments", "value": _value(json.dumps(structured(seed)))},
            {"key": "payload.bytes", "value": _value(f"b {prose(seed)} e".encode())},
            {"key": "list", "value": _value([EXAMPLES[k] for k in kinds])},
            {"key": "map", "value": _value(structured(seed))},
            {"key": f"key {EXAMPLES['aws_access_key_id']}", "value": _value("v")},
            *({"key": key, "value": _value(value)} for key, value in NAMED.items()),
        ]
        span["events"] = [
            {
                "name": EXAMPLES[kinds[(seed + index + 1) % len(kinds)]],
                "timeUnixNano": span["startTimeUnixNano"],
                "attributes": [{"key": "exception.message", "value": _value(prose(seed))}],
            }
        ]
    bad = dict(resource["scopeSpans"][0]["spans"][0], spanId="zz", name=prose(seed))
    resource["scopeSpans"][0]["spans"].append(bad)
    return document


def protobuf(document: dict[str, Any]) -> bytes:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    doc = json.loads(json.dumps(document))
    for resource in doc["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            scope["spans"] = [s for s in scope["spans"] if len(s["spanId"]) == 16]
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return bytes(ParseDict(doc, ExportTraceServiceRequest()).SerializeToString())


def post(port: int, body: bytes, content_type: str, encoding: str | None = None) -> int:
    headers = {"Content-Type": content_type, **({"Content-Encoding": encoding} if encoding else {})}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def through_the_receivers(store: EventStore) -> None:
    ingest = OtlpIngest(store, builtin_redactor(), settle_seconds=0.0)
    server = OtlpReceiver(("127.0.0.1", 0), ingest, assembler="none")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    port = server.server_address[1]
    try:
        good = json.dumps(planted_request(1)).encode()
        assert post(port, good, "application/json") == 200
        assert post(port, protobuf(planted_request(2)), "application/x-protobuf") == 200
        assert (
            post(
                port,
                gzip.compress(json.dumps(planted_request(3)).encode()),
                "application/json",
                "gzip",
            )
            == 200
        )
        assert post(port, good[: len(good) // 2], "application/json") == 400  # cut short
        assert post(port, good[:-3] + b"!!", "application/json") == 400  # broken
        _through_grpc(server, planted_request(4))
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    ingest.assemble(everything=True)


def _through_grpc(server: OtlpReceiver, document: dict[str, Any]) -> None:
    grpc = pytest.importorskip("grpc")
    from steplog.ingest.otlp.grpc_server import GrpcReceiver

    rpc = GrpcReceiver(server, "127.0.0.1", 0)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{rpc.port}") as channel:
            export = channel.unary_unary(
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                request_serializer=lambda body: body,
                response_deserializer=lambda data: data,
            )
            export(protobuf(document), timeout=60)
            with pytest.raises(grpc.RpcError):
                export(b"\x0a\xff\xff" + prose(4).encode(), timeout=60)
    finally:
        rpc.stop()


# --- the importers ----------------------------------------------------------------------------


def through_the_importers(
    store: EventStore, folder: Path, logs: dict[str, dict[str, Path]]
) -> None:
    redactor = builtin_redactor()
    named = folder / f"capture-{EXAMPLES['github_token']}.jsonl"
    lines = [json.dumps(planted_request(n)) for n in (5, 7)] + [one_line(prose(6))]
    lines.insert(1, json.dumps(planted_request(6))[:-40])  # cut short
    named.write_text("\n".join(lines) + "\n")
    ingest = OtlpIngest(store, redactor, source=f"otlp:{named}")
    import_documents(ingest, read_documents(named))

    events = folder / f"events-{EXAMPLES['huggingface_token']}.jsonl"
    good = {
        "run_id": "jsonl-run",
        "type": "StepStarted",
        "payload": {"step": prose(7), "step_index": 0},
    }
    events.write_text(
        "\n".join(
            [
                json.dumps(good),
                json.dumps({**good, "type": "NoSuchEvent", "payload": structured(7)}),
                json.dumps({**good, "payload": {"step": prose(8), "step_index": "x"}}),
                one_line(prose(9)),
                json.dumps(structured(9))[:-30],
            ]
        )
        + "\n"
    )
    import_jsonl(store, events, redactor=redactor)

    import_messages(store, _messages_file(folder), redactor=redactor)
    trajectory = _trajectory_file(folder)
    import_messages(
        store,
        trajectory,
        redactor=redactor,
        convert=lambda record, default: conversation_of_trajectory(
            record, default, instance=instance_of(trajectory)
        ),
        source="mini-swe-agent",
    )
    import_inspect(store, _inspect_log(folder, logs), redactor=redactor)


def _messages_file(folder: Path) -> Path:
    arguments = json.dumps({"cmd": f"mysql -u root -p {secret_of('cli_user_password')}", **NAMED})
    record = {
        "id": f"case-{EXAMPLES['npm_token']}",
        "task_instance_id": EXAMPLES["stripe_key"],
        "session_id": EXAMPLES["gitlab_token"],
        "outcome": "failed",
        "error": {"type": "Boom", "message": prose(10), "traceback": prose(11)},
        "messages": [
            {"role": "system", "content": prose(12)},
            {"role": "user", "content": [{"type": "text", "text": prose(13)}]},
            {
                "role": "assistant",
                "content": prose(14),
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "sh", "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": prose(15), "is_error": True},
        ],
    }
    path = folder / f"chat-{EXAMPLES['google_api_key']}.jsonl"
    unmappable = {"messages": "not a list", "note": prose(16), **NAMED}
    lines = [json.dumps(record), one_line(prose(17)), json.dumps(unmappable)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _trajectory_file(folder: Path) -> Path:
    trajectory = {
        "info": {"exit_status": "RuntimeError", "submission": prose(20),
                 "config": {"model": {"model_name": "m"}}},
        "messages": [
            {"role": "system", "content": prose(21)},
            {"role": "user", "content": prose(22)},
            {"role": "assistant", "content": prose(23),
             "extra": {"actions": [{"command": f"curl -u bob:{secret_of('url_userinfo')} x"}]}},
            {"role": "user", "content": prose(24), "extra": {"returncode": 1}},
            {"role": "exit", "content": prose(25),
             "extra": {"exit_status": "RuntimeError", "exception_str": prose(26),
                       "traceback": prose(27)}},
        ],
        "trajectory_format": "mini-swe-agent-1.1",
    }  # fmt: skip
    path = folder / f"{EXAMPLES['pypi_token']}.traj.json"
    path.write_text(json.dumps(trajectory))
    return path


def _inspect_log(folder: Path, logs: dict[str, dict[str, Path]]) -> Path:
    """A real Inspect log with the planted text in every sample's input, messages and events,
    and secret-named metadata, under a file name that holds a token."""
    source = next(iter(logs.values()))["json"].read_text()
    text = json.dumps(prose(30))[1:-1]
    for original in ("Think very hard", "What is 2 + 2?"):
        source = source.replace(original, text)
    log = json.loads(source)
    for sample in log["samples"]:
        sample["metadata"] = {**NAMED, "note": prose(31)}
    path = folder / f"inspect-{EXAMPLES['slack_token']}.json"
    path.write_text(json.dumps(log))
    return path


# --- the search -------------------------------------------------------------------------------


def stored_bytes(store: EventStore, url: str, folder: Path) -> bytes:
    """Everything the store holds, as bytes: the database (files or dump) and the archived
    spans decompressed."""
    spans = archive.load(store, list(archive.trace_ids(store)))
    unpacked = json.dumps([s.to_json() for t in spans.values() for s in t.spans]).encode()
    if url.startswith("sqlite"):
        files = b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("drill.db"))
        return files + _sqlite_dump(folder / "drill.db") + unpacked
    parsed = make_url(url)
    schema = parsed.query["options"].split("search_path%3D")[-1].split("=")[-1]
    dump = subprocess.run(
        ["pg_dump", "--schema", schema, "-h", parsed.host or "127.0.0.1", "-p",
         str(parsed.port or 5432), "-U", parsed.username or "postgres", parsed.database or "test"],
        capture_output=True, check=True, env={**os.environ, "PGCONNECT_TIMEOUT": "10"},
    ).stdout  # fmt: skip
    assert b"COPY" in dump and b"events" in dump
    return dump + unpacked


def _sqlite_dump(path: Path) -> bytes:
    """Every row as SQL text: a value longer than a page is split across overflow pages in the
    file, so the file's bytes alone could hide a secret that straddles two."""
    import sqlite3

    with sqlite3.connect(path) as conn:
        return "\n".join(conn.iterdump()).encode("utf-8", "surrogatepass")


def test_no_planted_secret_is_recoverable_from_the_store(
    store_url: str,
    tmp_path: Path,
    inspect_logs: dict[str, dict[str, Path]],  # noqa: F811
) -> None:
    url = f"sqlite:///{tmp_path}/drill.db" if store_url.startswith("sqlite") else store_url
    store = EventStore.open(url)
    try:
        through_the_receivers(store)
        through_the_importers(store, tmp_path, inspect_logs)
        assert store.count_quarantined() >= 8  # the bad input of every door was kept
        assert len(list(archive.trace_ids(store))) >= 6
        stored = stored_bytes(store, url, tmp_path)
    finally:
        store.close()
    assert stored.count(b"[REDACTED]") > 100  # the secrets were seen, and replaced
    found = {
        name: form.decode()
        for name, secret in SECRETS.items()
        for form in forms(secret)
        if form in stored
    }
    assert found == {}


def test_names_and_messages_are_cut_only_once_redacted(tmp_path: Path) -> None:
    """A name is cut to 1,000 characters and a status message to 64 KiB: cut first, a secret
    across the cut would keep its head, which no longer looks like a secret."""
    from steplog.ingest.otlp.span_model import MAX_MESSAGE, MAX_NAME
    from steplog.ingest.otlp.spans import decode_document

    secret = secret_of("openai_anthropic_key")
    document = planted_request(40)
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["name"] = "n" * (MAX_NAME - 8) + " " + secret
    span["status"] = {"code": 2, "message": "m" * (MAX_MESSAGE - 8) + " " + secret}
    store = EventStore.open(f"sqlite:///{tmp_path}/cut.db")
    try:
        OtlpIngest(store, builtin_redactor()).receive(decode_document(document))
    finally:
        store.close()
    stored = _sqlite_dump(tmp_path / "cut.db")
    assert secret[:7].encode() not in stored  # not even its head
    assert (b"n" * (MAX_NAME - 8) + b" [REDACTED]")[:MAX_NAME] + b'"' in stored  # cut after
