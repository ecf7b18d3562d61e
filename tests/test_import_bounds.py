"""Importers in bounded memory and time (issue 39): every importer reads lines through one
bounded reader, so a gigantic first line costs a chunk, a file of garbage stops early with one
line and a bounded sample in the quarantine, and a whole-file OTLP request is streamed in
batches of spans (equal, run for run, to the same spans sent line by line)."""

from __future__ import annotations

import io
import json
import random
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.otlp import agent_trace, request
from hypothesis import given, settings
from hypothesis import strategies as st

from steplog.ingest._lines import GARBAGE_RUN, GarbageError, Oversized, first_line_starts
from steplog.ingest._lines import iter_lines as bounded_lines
from steplog.ingest.otlp.files import read_documents
from steplog.ingest.otlp.pipeline import OtlpIngest, import_documents
from steplog.ingest.otlp.whole import BATCH_SPANS, streamed_requests
from steplog.ingest.redaction import default_redactor
from steplog.projections.queries import list_runs, refresh
from steplog.store import EventStore

ADDRESS_SPACE = 1024 * 1024 * 1024


def limited(*args: str) -> subprocess.CompletedProcess[str]:
    """``steplog ARGS`` with its address space capped at 1 GiB."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    return subprocess.run(
        [sys.executable, "-m", "steplog.cli", *args],
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=600,
    )


# --- the line reader ------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=80).filter(lambda b: b"\n" not in b), max_size=30),
    limit=st.integers(min_value=1, max_value=100),
)
def test_lines_are_read_whole_up_to_the_limit_and_cut_beyond(
    lines: list[bytes], limit: int
) -> None:
    data = b"\n".join(b"{" + line for line in lines)
    got = list(bounded_lines(io.BytesIO(data), limit, garbage_run=10**9))
    expected = [(n, b"{" + line) for n, line in enumerate(lines, 1) if (b"{" + line).strip()]
    assert [n for n, _ in got] == [n for n, _ in expected]
    for (_, line), (_, want) in zip(got, expected, strict=True):
        if isinstance(line, Oversized):
            assert line.size > limit and line.head == want[: len(line.head)]
        else:
            assert line == want.strip()


def test_a_huge_first_line_costs_a_chunk_not_its_size() -> None:
    class Counting(io.BytesIO):
        largest = 0

        def readline(self, size: int | None = -1) -> bytes:  # type: ignore[override]
            line = super().readline(size)
            Counting.largest = max(Counting.largest, len(line))
            return line

    stream = Counting(b"{" + b"x" * (20 * 1024 * 1024) + b"\n{}\n[1]\n")
    assert first_line_starts(stream, 3) == [b"{", b"{", b"["]
    assert Counting.largest <= 1024 * 1024


def test_a_run_of_garbage_lines_stops_the_reader() -> None:
    good = b'{"a": 1}\n'
    data = good + b"not json\n" * (GARBAGE_RUN // 2) + good + b"\x00\xff binary\n" * 1000
    lines = bounded_lines(io.BytesIO(data), 1000)
    read = []
    with pytest.raises(
        GarbageError, match=f"stopped at line {GARBAGE_RUN // 2 + 3 + GARBAGE_RUN:,}"
    ):
        for number, _ in lines:
            read.append(number)
    assert len(read) == 2 + GARBAGE_RUN // 2 + GARBAGE_RUN  # the sample before the stop


# --- the importers --------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["otlp", "messages", "mini-swe-agent"])
def test_a_gigantic_first_line_is_refused_within_bounded_memory(
    tmp_path: Path, command: str
) -> None:
    # the first line was read whole to sniff the file: 1 GB without a newline took 2.1 GB
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as file:
        file.write(b'{"x": "')
        for _ in range(600):
            file.write(b"x" * (1024 * 1024))
        file.write(b'"}\n{}\n{}\n')
    done = limited("import", command, str(path), "--db", f"sqlite:///{tmp_path}/s.db")
    assert "MemoryError" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 1 and "over 67,108,864" in done.stderr, done.stderr[-2000:]


def test_a_binary_file_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "random.jsonl"
    path.write_bytes(random.Random(1).randbytes(1024 * 1024))
    for command in ("jsonl", "otlp", "messages"):
        done = limited("import", command, str(path), "--db", f"sqlite:///{tmp_path}/s.db")
        assert done.returncode == 1, done.stderr
        assert "looks like a binary file" in done.stderr and "nothing was imported" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("command", ["jsonl", "otlp"])
def test_a_file_of_text_garbage_stops_early_with_a_bounded_sample(
    store_url: str, tmp_path: Path, command: str
) -> None:
    # 10 MB of garbage wrote a quarantine row per "line" (10k rows, still running at 300 s)
    path = tmp_path / "garbage.jsonl"
    if command == "jsonl":
        good = {"run_id": "r1", "type": "StepStarted", "payload": {"step": "a", "step_index": 0}}
    else:
        good = request(*agent_trace(random.Random(1)))
    garbage = [f"garbage {n} " + "z" * 80 for n in range(20_000)]
    lines = [json.dumps(good)] * 3 + garbage
    path.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "steplog.cli", "import", command, str(path), "--db", store_url],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1
    assert f"stopped at line {3 + GARBAGE_RUN + 1:,}" in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("error:")
    store = EventStore.open(store_url)
    try:
        assert GARBAGE_RUN <= store.count_quarantined() <= GARBAGE_RUN + 1  # + the stop
        refresh(store)  # what came before the garbage is stored
        assert len({e.run_id for e in store.read_all()}) == 1
    finally:
        store.close()


def _spans_document(traces: int) -> dict[str, object]:
    spans = []
    for n in range(traces):
        spans.extend(agent_trace(random.Random(n), instance=f"i{n}"))
    document = request(*spans)
    document["resourceSpans"][0]["schemaUrl"] = "https://example.invalid/1"  # type: ignore[index]
    return document


def test_a_whole_file_request_streams_in_batches_with_its_resource_and_scope() -> None:
    document = _spans_document(200)
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]  # type: ignore[index]
    resource_first = json.dumps(document).encode()
    item = document["resourceSpans"][0]  # type: ignore[index]
    document["resourceSpans"][0] = dict(reversed(list(item.items())))  # type: ignore[index]
    resource_last = json.dumps(document).encode()
    for body in (resource_first, resource_last):
        batches = list(streamed_requests(io.BytesIO(body)))
        assert len(batches) == -(-len(spans) // BATCH_SPANS)
        got = []
        for _, request_doc in batches:
            (resource_spans,) = request_doc["resourceSpans"]
            assert resource_spans["resource"] == item["resource"]
            (scope_spans,) = resource_spans["scopeSpans"]
            assert scope_spans["scope"] == item["scopeSpans"][0]["scope"]
            got.extend(scope_spans["spans"])
        assert got == spans


def test_a_whole_file_request_imports_like_the_same_spans_line_by_line(
    store_url: str, tmp_path: Path
) -> None:
    document = _spans_document(120)
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps(document, indent=1))
    lines = tmp_path / "lines.jsonl"
    lines.write_text(
        "\n".join(
            json.dumps(request(*agent_trace(random.Random(n), instance=f"i{n}")))
            for n in range(120)
        )
        + "\n"
    )
    summaries = []
    for path in (whole, lines):
        store = EventStore.open(store_url)
        try:
            ingest = OtlpIngest(store, default_redactor(), source=f"otlp:{path}")
            report = import_documents(ingest, read_documents(path))
            assert report.runs == 120 and not report.quarantined
            refresh(store)
            summaries.append(
                sorted(
                    json.dumps(run.model_dump(), sort_keys=True, default=str)
                    for run in list_runs(store, limit=500)
                )
            )
        finally:
            store.close()
    assert summaries[0] == summaries[1]


def test_a_whole_file_request_is_read_in_memory_independent_of_its_size(
    tmp_path: Path,
) -> None:
    # a 116 MB capture parsed whole peaked at 2.0 GB: its objects take ~10x the file
    import tracemalloc

    path = tmp_path / "big.json"
    with path.open("w") as file:
        file.write('{"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": [')
        for n in range(20_000):
            spans = agent_trace(random.Random(n % 50), instance=f"i{n}")
            file.write(("," if n else "") + ",".join(json.dumps(s) for s in spans))
        file.write("]}]}]}")
    size = path.stat().st_size
    assert size > 20 * 1024 * 1024
    tracemalloc.start()
    try:
        batches = sum(1 for _ in read_documents(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert batches > 100
    assert peak < size / 4  # a batch of spans at a time, not the document


def test_deep_nesting_in_a_streamed_request_is_refused() -> None:
    body = b'{"resourceSpans": [{"scopeSpans": [{"spans": [' + b"[" * 5000 + b"]" * 5000 + b"]}]}]}"
    with pytest.raises(ValueError, match="nested more than"):
        list(streamed_requests(io.BytesIO(body)))
