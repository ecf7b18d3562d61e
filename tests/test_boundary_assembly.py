"""One bad trace fails alone (issue 39): any span graph gets a defined outcome.

Property: random traces whose parent pointers are anything -- none, itself, another span of
the trace (cycles of any length), an id that never arrives -- with span ids repeated (same or
other content), several parentless spans, errors anywhere, fed through the real pipeline (the
receiver's staging and the assembler's ready look-up, or a file import) on both engines: no
exception escapes, nothing is left staged, every trace is a run or quarantined, and every
reader (runs, failures, metrics, rebuild) still works.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers.otlp import request, span
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steplog.ingest.otlp.genai import run_id_for
from steplog.ingest.otlp.pipeline import OtlpIngest, import_documents
from steplog.ingest.otlp.spans import decode_document
from steplog.ingest.redaction import default_redactor
from steplog.projections.library import LibraryProjection
from steplog.projections.queries import list_failures, list_runs, metrics, refresh
from steplog.store import EventStore

TERMINAL = {"RunCompleted", "RunFailed", "RunAborted"}


@st.composite
def span_graphs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The spans of one trace: ids from a small pool (repeats), parents drawn from anything."""
    trace = uuid.uuid4().hex
    pool = [f"{n + 1:016x}" for n in range(draw(st.integers(1, 6)))]
    spans = []
    for _ in range(draw(st.integers(1, 8))):
        span_id = draw(st.sampled_from(pool))
        parent = draw(
            st.one_of(
                st.none(),
                st.just(span_id),  # its own parent
                st.sampled_from(pool),  # a sibling, a child: cycles of any length
                st.just("ffffffffffffffff"),  # a parent that never arrives
            )
        )
        start = draw(st.integers(0, 50))
        kind = draw(st.sampled_from(["step", "chat", "tool"]))
        attributes: dict[str, Any] = {}
        if kind == "chat":
            attributes = {
                "gen_ai__operation__name": "chat",
                "gen_ai__request__model": "m",
                "gen_ai__usage__input_tokens": draw(st.sampled_from([5, 2**63 - 1, -7])),
            }
        elif kind == "tool":
            attributes = {"gen_ai__operation__name": "execute_tool", "gen_ai__tool__name": "t"}
        spans.append(
            span(
                trace,
                span_id,
                draw(st.sampled_from(["Step 1", "Step 2", "agent", "x"])),
                parent=parent,
                start=start,
                end=start + draw(st.integers(0, 5)),
                error=draw(st.sampled_from([None, None, "ToolError"])),
                message="boom",
                **attributes,
            )
        )
    return spans


@pytest.fixture
def assembly_store(store_url: str) -> Iterator[EventStore]:
    store = EventStore.open(store_url)
    yield store
    store.close()


def _requests(traces: list[list[dict[str, Any]]], rng: random.Random) -> list[dict[str, Any]]:
    """Every span, shuffled into one to three requests."""
    spans = [s for trace in traces for s in trace]
    rng.shuffle(spans)
    cut = sorted(rng.sample(range(len(spans) + 1), 2))
    parts = [spans[: cut[0]], spans[cut[0] : cut[1]], spans[cut[1] :]]
    return [request(*part) for part in parts if part]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # the store accumulates traces on purpose: readers must cope with all of them at once
@given(
    traces=st.lists(span_graphs(), min_size=1, max_size=3),
    seed=st.integers(0, 2**32),
    through_file=st.booleans(),
)
def test_any_span_graph_is_stored_or_quarantined_and_readers_work(
    assembly_store: EventStore,
    traces: list[list[dict[str, Any]]],
    seed: int,
    through_file: bool,
) -> None:
    store = assembly_store
    rng = random.Random(seed)
    documents = _requests(traces, rng)
    now = [datetime.now(UTC)]
    ingest = OtlpIngest(store, default_redactor(), source="otlp:fuzz", clock=lambda: now[0])
    if through_file:
        import_documents(ingest, [(f"doc {n}", d) for n, d in enumerate(documents)])
    else:  # as the receiver stages them, then the assembler's look-up once they are quiet
        for document in documents:
            ingest.receive(decode_document(json.loads(json.dumps(document))))
        now[0] += timedelta(minutes=1)
        ingest.assemble()
    assert ingest.pending() == (0, 0)
    # every record: the store accumulates examples, and past the default page of 100 a trace
    # quarantined now would not be listed (a flaky failure on PostgreSQL)
    quarantined = " ".join(q.location for q in store.quarantined(limit=1_000_000))
    for trace in traces:
        trace_id = trace[0]["traceId"]
        events = store.read_run(run_id_for(trace_id))
        if not events:
            assert trace_id in quarantined
            continue
        reading = [e.type for e in events]
        start = max(i for i, t in enumerate(reading) if t in ("RunStarted", "RunRevised"))
        assert reading[-1] in TERMINAL and sum(t in TERMINAL for t in reading[start:]) == 1
    refresh(store)
    list_runs(store)
    list_failures(store)
    metrics(store)
    LibraryProjection(store).rebuild()
