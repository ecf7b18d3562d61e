"""The span -> event mapping is pinned byte for byte.

``helpers/mapping_corpus.jsonl.gz`` holds traces captured from the framework, OTLP, revision and
fuzz tests (real LangGraph, pydantic-ai, OpenAI Agents SDK, OTel SDK exports), the bench's own
traces and hand-made edge cases (non-finite and huge numbers, unicode, orphans, tracebacks,
flattened messages), each with the events the mapping made of it before the assembly was made
cheaper: ids, types, schema versions, payload JSON and times. The mapping must still give exactly
those bytes, and a whole assembly round must store them (SQLite: the same text; PostgreSQL: the
same jsonb).

When an event type gains a version, the expectations are rewritten only after checking that the
sole difference is that version and its new field (null for traces): RunStarted v3 added
``role_versions`` and StepStarted v2 ``role`` (423 rows, checked so, on 2026-12-01); RunStarted
v4 ``synthetic_root`` (false for every case) and ModelCalled/ToolCalled v3 ``clamped`` (null for
every case), checked so over all 114 cases: nothing else changed.
"""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_core import from_json, to_json

from steplog.events import catalogue
from steplog.ingest.otlp.genai import map_trace
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.rounds import RoundContext, assemble_round
from steplog.ingest.otlp.span_model import Span
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore, prepare

CORPUS = Path(__file__).parent / "helpers" / "mapping_corpus.jsonl.gz"
LIMIT = 1_000_000


def _corpus() -> list[tuple[list[Span], dict[str, Any]]]:
    cases = []
    with gzip.open(CORPUS, "rt") as lines:
        for line in lines:
            case = json.loads(line)
            spans = [Span.from_compact(row) for row in from_json(json.dumps(case["spans"]))]
            cases.append((spans, case["expected"]))
    return cases


CASES = _corpus()


def _rows(prepared: list[Any]) -> list[list[Any]]:
    return [
        [
            p.event_id.hex,
            p.type,
            p.schema_version,
            p.payload_json,
            p.recorded_at.isoformat() if p.recorded_at else None,
        ]
        for p in prepared
    ]


def test_the_corpus_is_varied() -> None:
    types = {row[1] for _, expected in CASES for row in expected["events"]}
    assert len(CASES) >= 100
    assert {"ModelCalled", "ToolCalled", "StepAttemptFailed", "StepFailed", "RunFailed"} <= types
    assert {"RunCompleted", "StepCompleted", "StepStarted", "RunStarted"} <= types


@pytest.mark.parametrize("index", range(len(CASES)))
def test_mapping_gives_the_pinned_bytes(index: int) -> None:
    spans, expected = CASES[index]
    run = map_trace(spans)
    assert run.run_id == expected["run_id"]
    assert _rows(prepare(run.events, catalogue, LIMIT)) == expected["events"]


def test_a_round_stores_the_pinned_rows(store: EventStore) -> None:
    cases = {spans[0].trace_id: (spans, expected) for spans, expected in CASES}  # late spans:
    assert len(cases) >= 90  # a trace is in the corpus with and without them
    loaded = {trace_id: spans for trace_id, (spans, _) in cases.items()}
    now = datetime(2026, 1, 1, tzinfo=UTC)
    sqlite = store.engine.dialect.name == "sqlite"
    staged = [  # staged as the receiver stages them (unredacted: the corpus has no secrets)
        (s.trace_id, s.span_id, now, int(not s.parent_span_id), to_json(s.to_compact()).decode())
        for spans in loaded.values()
        for s in spans
    ]
    if not sqlite:
        staged = [(*row[:3], bool(row[3]), row[4]) for row in staged]
    ingest = OtlpIngest(store, default_redactor())
    assert ingest._stage(staged) == {}
    context = RoundContext(store, "otlp:test", timedelta(seconds=600), lambda: now)
    outcome = assemble_round(context, loaded)
    assert not outcome.report.quarantined
    assert outcome.report.appended == sum(len(e["events"]) for _, e in cases.values())
    mark = "?" if sqlite else "%s"
    with store.engine.connect() as conn:
        for _, expected in cases.values():
            stored = store.read_run(expected["run_id"])
            got = [[e.event_id.hex, e.type, e.schema_version, e.recorded_at] for e in stored]
            want = [
                [r[0], r[1], r[2], datetime.fromisoformat(r[4]).replace(tzinfo=None)]
                for r in expected["events"]
            ]
            assert [g[:3] for g in got] == [w[:3] for w in want]
            assert [g[3].replace(tzinfo=None) for g in got] == [w[3] for w in want]
            column = "payload" if sqlite else "payload::text"
            payloads = conn.exec_driver_sql(
                f"SELECT {column} FROM events WHERE run_id = {mark} ORDER BY seq",
                (expected["run_id"],),
            ).all()
            if sqlite:  # stored as the text itself
                assert [row[0] for row in payloads] == [r[3] for r in expected["events"]]
            else:  # jsonb keeps the document, not the text: as PostgreSQL reads the pinned text
                for row, r in zip(payloads, expected["events"], strict=True):
                    want_text = conn.exec_driver_sql("SELECT %s::jsonb::text", (r[3],)).scalar()
                    assert row[0] == want_text
