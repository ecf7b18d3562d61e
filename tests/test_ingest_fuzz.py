"""Fuzzing the decoders (hypothesis): whatever comes in, nothing crashes and nothing is half-stored.

Invariants checked on every example:
* JSONL: every non-blank line is accounted for exactly once (appended, already stored or
  quarantined), and every run in the store has gapless sequence numbers;
* OTLP/JSON: the decoder raises nothing but ``RequestError``; whatever it accepts is staged and
  then assembled into well-formed runs (``RunStarted`` first, one terminal event last), and the
  staging table ends empty.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.otlp import agent_trace, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steplog.ingest.jsonl import import_jsonl
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.span_model import RequestError
from steplog.ingest.otlp.spans import decode_document
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

TERMINAL = {"RunCompleted", "RunFailed", "RunAborted"}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EventStore]:
    store = EventStore.open(str(tmp_path_factory.mktemp("fuzz") / "fuzz.db"))
    yield store
    store.close()


def _valid_line(run: str, seq: int) -> dict[str, Any]:
    if seq == 0:
        return {
            "run_id": run,
            "seq": 0,
            "type": "RunStarted",
            "payload": {"scenario": "s", "model_version": "v", "agent": "a"},
        }
    return {
        "run_id": run,
        "seq": seq,
        "type": "StepStarted",
        "payload": {"step": f"step {seq}", "step_index": seq - 1},
    }


@st.composite
def jsonl_files(draw: st.DrawFn) -> list[bytes]:
    run = f"fuzz-{uuid.uuid4().hex[:12]}"
    lines: list[bytes] = []
    seq = 0
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["valid", "valid", "json", "bytes", "cut", "mutated"]))
        if kind == "valid":
            lines.append(json.dumps(_valid_line(run, seq)).encode())
            seq += 1
        elif kind == "json":
            lines.append(json.dumps(draw(json_values)).encode())
        elif kind == "bytes":
            lines.append(draw(st.binary(max_size=40)).replace(b"\n", b" "))
        elif kind == "cut":
            text = json.dumps(_valid_line(run, seq)).encode()
            lines.append(text[: draw(st.integers(1, len(text) - 1))])
        else:
            record = _valid_line(run, seq)
            key = draw(st.sampled_from(["run_id", "seq", "type", "payload", "event_id"]))
            record[key] = draw(json_values)
            lines.append(json.dumps(record).encode())
    return lines


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=jsonl_files())
def test_jsonl_import_accounts_for_every_line(
    fuzz_store: EventStore, tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]
) -> None:
    path = tmp_path_factory.mktemp("jsonl") / "fuzz.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    report = import_jsonl(fuzz_store, path)
    non_blank = sum(1 for line in lines if line.strip())
    assert report.appended + report.already_stored + len(report.quarantined) == non_blank
    for run in report.run_ids:
        seqs = [e.seq for e in fuzz_store.read_run(run)]
        assert seqs == list(range(len(seqs)))


@st.composite
def otlp_documents(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return draw(json_values)
    rng = random.Random(draw(st.integers(0, 2**32)))
    document = request(*agent_trace(rng, fail_tool=draw(st.booleans())))
    for _ in range(draw(st.integers(0, 4))):
        _mutate(document, draw)
    return document


def _mutate(node: Any, draw: st.DrawFn) -> None:
    """Replace or delete one value somewhere inside ``node``."""
    path = []
    while isinstance(node, dict | list) and node and draw(st.integers(0, 3)) > 0:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = draw(st.sampled_from(keys))
        path.append((node, key))
        node = node[key]
    if not path:
        return
    parent, key = path[-1]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[key]
    else:
        parent[key] = draw(json_values)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=otlp_documents())
def test_otlp_json_decoder_never_crashes_or_half_stores(
    fuzz_store: EventStore, document: Any
) -> None:
    try:
        decoded = decode_document(copy.deepcopy(document))
    except RequestError:
        return
    ingest = OtlpIngest(fuzz_store, default_redactor(), source="otlp:fuzz")
    received = ingest.receive(decoded)
    assert received.accepted == len(decoded.spans)
    report = ingest.assemble(everything=True)
    assert ingest.pending() == (0, 0)
    for run in report.run_ids:
        types = [e.type for e in fuzz_store.read_run(run)]
        assert types[0] == "RunStarted" and types[-1] in TERMINAL
        # Examples share the store, so hypothesis may send a trace it sent before with other
        # spans: they arrive late and revise the run (RunRevised, then the run as it now reads).
        # Each reading -- the original and every revision -- ends exactly once.
        cut = [0] + [i for i, t in enumerate(types) if t == "RunRevised"] + [len(types)]
        for start, end in itertools.pairwise(cut):
            assert sum(t in TERMINAL for t in types[start:end]) == 1, types


def test_otlp_json_file_import_of_random_bytes_is_quarantined(tmp_path: Path) -> None:
    from steplog.ingest.otlp.files import read_documents
    from steplog.ingest.otlp.pipeline import import_documents

    store = EventStore.open(str(tmp_path / "s.db"))
    try:
        path = tmp_path / "noise.json"
        path.write_bytes(bytes(range(256)) * 4)
        report = import_documents(OtlpIngest(store, default_redactor()), read_documents(path))
        assert report.appended == 0 and len(report.quarantined) == 1
        assert "not UTF-8" in report.quarantined[0].reason
        assert store.last_position() == 0
    finally:
        store.close()


def _valid_protobuf(spans: int) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    pb = ExportTraceServiceRequest()
    scope = pb.resource_spans.add().scope_spans.add()
    for index in range(spans):
        span = scope.spans.add()
        span.trace_id = bytes(range(1, 17))
        span.span_id = bytes([index + 1] * 8)
        span.name = f"span-{index}"
        span.start_time_unix_nano, span.end_time_unix_nano = 10, 20
    return pb.SerializeToString()


@settings(max_examples=300, deadline=None)
@given(
    spans=st.integers(min_value=1, max_value=4),
    edits=st.lists(st.tuples(st.integers(min_value=0), st.binary(max_size=3)), max_size=4),
)
def test_protobuf_decoder_accounts_for_every_span_of_a_mutated_request(
    spans: int, edits: list[tuple[int, bytes]]
) -> None:
    """Whatever bytes are overwritten, the decoder either refuses the request (a 400) or
    accounts for it: good spans decoded, bad parts named; it never raises anything else."""
    from steplog.ingest.otlp.spans import decode_protobuf

    body = bytearray(_valid_protobuf(spans))
    for offset, data in edits:
        at = offset % len(body)
        body[at : at + len(data)] = data
    try:
        decoded = decode_protobuf(bytes(body))
    except RequestError:
        return
    assert len(decoded.spans) <= spans + 8  # (a mutation can create a span, never many)
    for bad in decoded.rejected:
        assert bad.location and bad.reason
        assert "span-" not in bad.raw or bad.raw.startswith("{")  # bytes only as a hash
