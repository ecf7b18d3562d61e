"""What assembly rounds store is pinned byte for byte, on each engine (issue 38).

The OTLP inputs the tests hold -- every framework trace of the conformance corpus
(``tests/corpus/traces``), the pinned mapping corpus (``helpers/mapping_corpus.jsonl.gz``:
real exports and hand-made edge cases; a trace held there twice comes back as late spans, so
the second assembly revises runs) and the ingest bench's own traces -- are received and
assembled with a fixed clock, as the receiver and the assembler do it. Then every stored event
(position, id, run, seq, type, schema version, recorded time, payload as the database holds it)
and every archived trace (its spans decompressed) is hashed, and the digests must be those
recorded from the code before the rounds were made cheaper (commit fe6144d): a faster round
must store exactly the same bytes. SQLite keeps the payload text itself; PostgreSQL's jsonb
keeps the document, read back as its own text, hence one digest per engine.

A digest changes only when the mapping does on purpose (a new event version): then check the
change is that alone (``tests/test_ingest_mapping_pinned.py`` names the events) and record the
digests again (``STEPLOG_PRINT_DIGESTS=1`` prints them).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_core import from_json, to_json

from steplog.bench import ingest_client
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.span_model import Span
from steplog.ingest.otlp.spans import decode_json, decode_protobuf
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

HERE = Path(__file__).parent
TRACES = HERE / "corpus" / "traces"
MAPPING_CORPUS = HERE / "helpers" / "mapping_corpus.jsonl.gz"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
BENCH_START_NS = 1_767_225_600_000_000_000  # 2026-01-01, for the bench traces' times

PINNED = {
    "sqlite": {
        "events": "81016ed24a0691d9819224c365dc473959727c98fe0598d2f546c18935d6e4a4",
        "archive": "ad752e0c0b84ad73f436ffac93faa1696a69ed55a867bc9ea6e4a7910b6fc148",
    },
    "postgresql": {
        "events": "cbf9920e339984503a29a3d8ae214af8adfa20d6950a72e662aa08cc65cbc87f",
        "archive": "101d5739d0ad3e7b50f4a78f49e35c3b74cc35403994acab1f95277ab072512a",
    },
}
"""sha256 of the stored events and of the archived traces (see the module docstring)."""


def _mapping_cases() -> tuple[list[list[Span]], list[list[Span]]]:
    """The mapping corpus's traces: each trace's version with the fewest spans, and, for a
    trace held in versions of different sizes, its largest (the late spans come with it)."""
    versions: dict[str, list[list[Span]]] = {}
    with gzip.open(MAPPING_CORPUS, "rt") as lines:
        for line in lines:
            case = json.loads(line)
            spans = [Span.from_compact(row) for row in from_json(json.dumps(case["spans"]))]
            versions.setdefault(spans[0].trace_id, []).append(spans)
    first = [min(held, key=len) for held in versions.values()]
    later = [max(held, key=len) for held in versions.values() if len(set(map(len, held))) > 1]
    return first, later


def _stage(ingest: OtlpIngest, traces: list[list[Span]], sqlite: bool) -> None:
    """Stage spans as the receiver stages them (unredacted: the corpus holds no secrets)."""
    stamp: Any = NOW.strftime("%Y-%m-%d %H:%M:%S.%f") if sqlite else NOW
    rows = [
        (s.trace_id, s.span_id, stamp, is_root if sqlite else bool(is_root), body)
        for spans in traces
        for s in spans
        for is_root, body in [(int(not s.parent_span_id), to_json(s.to_compact()).decode())]
    ]
    assert ingest._stage(rows) == {}


def _digests(store: EventStore, sqlite: bool) -> dict[str, str]:
    at = (
        "recorded_at"
        if sqlite
        else "to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"
    )
    payload = "payload" if sqlite else "payload::text"
    events = hashlib.sha256()
    archive = hashlib.sha256()
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT position, event_id, run_id, seq, type, schema_version, {at}, {payload} "
            "FROM events ORDER BY position"
        ).all()
        assert [row[0] for row in rows] == list(range(1, len(rows) + 1))
        for position, event_id, *rest in rows:
            hex_id = event_id if isinstance(event_id, str) else event_id.hex
            events.update(json.dumps([position, hex_id.replace("-", ""), *rest]).encode())
        traces = conn.exec_driver_sql(
            "SELECT trace_id, run_id, span_count, spans, root_missing FROM otlp_traces "
            "ORDER BY trace_id"
        ).all()
        for trace_id, run_id, count, blob, missing in traces:
            spans = zlib.decompress(bytes(blob)).decode()
            archive.update(json.dumps([trace_id, run_id, count, spans, bool(missing)]).encode())
    return {"events": events.hexdigest(), "archive": archive.hexdigest(), "rows": str(len(rows))}


def test_assembly_stores_the_pinned_bytes(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite = store.engine.dialect.name == "sqlite"
    ingest = OtlpIngest(store, default_redactor(), clock=lambda: NOW, late_window_seconds=600)
    for path in sorted(TRACES.glob("*/*.jsonl")):
        for line in path.read_bytes().splitlines():
            if line.strip():
                received = ingest.receive(decode_json(line))
                assert not received.rejected, path
    monkeypatch.setattr(ingest_client.time, "time_ns", lambda: BENCH_START_NS)
    bodies, _, _ = ingest_client.build_requests(30, 10, seed=38)  # not the corpus's
    for body in bodies:
        ingest.receive(decode_protobuf(gzip.decompress(body)))
    first, later = _mapping_cases()
    _stage(ingest, first, sqlite)
    report = ingest.assemble(everything=True)
    assert not report.quarantined
    assert report.appended > 1_000
    _stage(ingest, later, sqlite)  # late spans: the runs of those traces are revised
    revised = ingest.assemble(everything=True)
    assert revised.appended > 0
    got = _digests(store, sqlite)
    if os.environ.get("STEPLOG_PRINT_DIGESTS"):
        print(store.engine.dialect.name, got)
    engine = "sqlite" if sqlite else "postgresql"
    assert {k: got[k] for k in ("events", "archive")} == PINNED[engine]


def test_a_round_runs_with_the_collector_paused(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cyclic collector is off for the whole round (mapping, preparing, the transaction),
    back on after it, also when the round raises; a caller that had it off keeps it off."""
    import gc

    from steplog.ingest.otlp import premap, rounds

    sqlite = store.engine.dialect.name == "sqlite"
    first, _ = _mapping_cases()
    loaded = {spans[0].trace_id: spans for spans in first[:3]}
    ingest = OtlpIngest(store, default_redactor(), clock=lambda: NOW)
    _stage(ingest, list(loaded.values()), sqlite)
    context = rounds.RoundContext(store, "otlp:test", timedelta(seconds=600), lambda: NOW)
    seen: list[bool] = []
    real_map, real_flush = rounds.map_trace, rounds._Writer._flush

    def mapping(spans: list[Span]) -> Any:
        seen.append(gc.isenabled())
        return real_map(spans)

    def flush(writer: Any, position: int) -> None:
        seen.append(gc.isenabled())
        real_flush(writer, position)

    monkeypatch.setattr(premap, "map_trace", mapping)  # before the transaction
    monkeypatch.setattr(rounds, "map_trace", mapping)  # inside it (none here)
    monkeypatch.setattr(rounds._Writer, "_flush", flush)
    assert gc.isenabled()
    outcome = rounds.assemble_round(context, loaded)
    assert outcome.report.appended > 0 and len(seen) == 4 and not any(seen)
    assert gc.isenabled()

    def broken(writer: Any, position: int) -> None:
        raise RuntimeError("the round fails")

    monkeypatch.setattr(rounds._Writer, "_flush", broken)
    _stage(ingest, [first[3]], sqlite)
    with pytest.raises(RuntimeError, match="the round fails"):
        rounds.assemble_round(context, {first[3][0].trace_id: first[3]})
    assert gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(RuntimeError):
            rounds.assemble_round(context, {first[3][0].trace_id: first[3]})
        assert not gc.isenabled()
    finally:
        gc.enable()
