"""Defined outcomes for bad traces (issues 39 and 32), one test per defect, on both engines.

Cycles and self-parents, duplicate span ids, orphan forests (the smolagents crash: no root,
"Step 1" OK first, the last step in error), a trace whose assembly raises, an assembler loop
that meets an exception, a span re-sent after assembly with other content, a seed no column
holds, a folder import with one wrong file.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers.otlp import request, span
from typer.testing import CliRunner

from steplog.cli import app
from steplog.events import RunFailed, RunRevised, RunStarted, ToolCalled
from steplog.ingest.otlp import archive
from steplog.ingest.otlp.assembler import assemble_until
from steplog.ingest.otlp.genai import map_trace, run_id_for
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.span_model import Span
from steplog.ingest.otlp.spans import decode_document
from steplog.ingest.otlp.tree import SYNTHETIC_ROOT_ID, SpanTree
from steplog.ingest.redaction import default_redactor
from steplog.projections.queries import list_failures, list_runs, refresh
from steplog.store import EventStore

runner = CliRunner()
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
A, B, C, MISSING = "00f067aa0ba902b7", "1111111111111111", "2222222222222222", "9999999999999999"


@pytest.fixture
def store(store_url: str) -> Iterator[EventStore]:
    opened = EventStore.open(store_url)
    yield opened
    opened.close()


def _spans(document: dict[str, Any]) -> list[Span]:
    return decode_document(document).spans


# --- the tree: a rule over the parent pointers ------------------------------------------------


def test_a_cycle_is_cut_at_its_earliest_span_and_a_rootless_forest_gets_a_synthetic_root() -> None:
    loop = SpanTree(
        _spans(
            request(
                span(TRACE, B, "b", parent=C, start=2, end=3),
                span(TRACE, C, "c", parent=A, start=3, end=4),
                span(TRACE, A, "a", parent=B, start=1, end=5),  # a -> b -> c -> a
            )
        )
    )
    assert loop.synthetic and loop.root.span_id == SYNTHETIC_ROOT_ID
    assert [s.span_id for s in loop.children_of(loop.root)] == [A]  # the earliest, cut loose
    assert [s.span_id for s in loop.subtree(loop.root)] == [SYNTHETIC_ROOT_ID, A, B, C]
    assert any("a cycle" in gap and A in gap for gap in loop.gaps())
    assert any("root span never arrived" in gap for gap in loop.gaps())
    itself = SpanTree(_spans(request(span(TRACE, A, "loop", parent=A))))
    assert itself.synthetic and itself.children_of(itself.root)[0].span_id == A
    two = request(span(TRACE, A, "one"), span(TRACE, B, "two", start=2, end=3))
    two_roots = SpanTree(_spans(two))
    assert two_roots.synthetic and len(two_roots.children_of(two_roots.root)) == 2
    assert "2 spans have no parent" in two_roots.gaps()[0]


def test_of_several_spans_with_one_id_the_first_is_kept() -> None:
    first = span(TRACE, B, "first", parent=A, start=1, end=2)
    second = span(TRACE, B, "second", parent=A, start=1, end=2)
    tree = SpanTree(_spans(request(span(TRACE, A, "root", end=3), first, second)))
    assert tree.by_id[B].name == "first" and not tree.synthetic
    assert any("sent 2 times" in gap for gap in tree.gaps())


@pytest.mark.parametrize(
    "document",
    [
        request(span(TRACE, A, "loop", parent=A)),
        request(span(TRACE, A, "a", parent=B), span(TRACE, B, "b", parent=A)),
        request(
            span(TRACE, A, "a", parent=C), span(TRACE, B, "b", parent=A),
            span(TRACE, C, "c", parent=B),
        ),
        request(span(TRACE, A, "root", end=5), span(TRACE, A, "root again", end=6)),
    ],
    ids=["self-parent", "two-cycle", "three-cycle", "root-twice"],
)  # fmt: skip
def test_import_otlp_of_a_bad_graph_stores_a_run_and_leaves_nothing_staged(
    store_url: str, tmp_path: Path, document: dict[str, Any]
) -> None:
    file = tmp_path / "trace.json"
    file.write_text(json.dumps(document))
    result = runner.invoke(app, ["import", "otlp", str(file), "--db", store_url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    assert result.stdout.startswith("1 run(s): appended ")
    store = EventStore.open(store_url)
    try:
        assert OtlpIngest(store, default_redactor()).pending() == (0, 0)
        assert store.version(run_id_for(TRACE)) > 0
        if "root again" in json.dumps(document):  # the second version: refused and said so
            assert result.exit_code == 1 and "quarantined 1" in result.stdout
            (kept,) = store.quarantined()
            assert "re-sent with the same ids and different content" in kept.reason
    finally:
        store.close()


# --- missing roots are failures until proven otherwise ----------------------------------------


def _smolagents_crash() -> dict[str, Any]:
    """smolagents 1.26 / OpenInference 0.1.43 after a crash: the agent's root span is never
    exported; "Step 1" (OK, with its model call) comes first, the last step is in error."""
    return request(
        span(TRACE, A, "Step 1", parent=MISSING, start=1, end=4, openinference__span__kind="CHAIN"),
        span(TRACE, B, "LiteLLMModel.generate", parent=A, start=2, end=3,
             openinference__span__kind="LLM", llm__model_name="gpt-4o",
             llm__token_count__prompt=120, llm__token_count__completion=14),
        span(TRACE, C, "Step 2", parent=MISSING, start=5, end=6, error="AgentExecutionError",
             message="tool get_weather failed", openinference__span__kind="CHAIN"),
    )  # fmt: skip


def test_a_crash_without_its_root_is_a_failed_run_in_the_library(store: EventStore) -> None:
    now = [datetime.now(UTC)]
    ingest = OtlpIngest(store, default_redactor(), clock=lambda: now[0])
    ingest.receive(decode_document(_smolagents_crash()))
    assert ingest.assemble().runs == 0  # still arriving, perhaps
    now[0] += timedelta(seconds=31)  # quiet for the quiet period: not the old 600 s timeout
    assert ingest.assemble().runs == 1 and ingest.pending() == (0, 0)
    events = [e.to_event() for e in store.read_run(run_id_for(TRACE))]
    started, failed = events[0], events[-1]
    assert isinstance(started, RunStarted) and started.synthetic_root
    assert started.planned_steps == ["Step 1", "Step 2"]
    assert "the root span never arrived" in started.gaps[0]
    assert isinstance(failed, RunFailed) and failed.step == "Step 2"
    assert failed.error_type == "AgentExecutionError"
    refresh(store)
    (failure,) = list_failures(store)
    assert failure.error_type == "AgentExecutionError"


def test_a_root_that_comes_later_revises_the_run_it_proves_otherwise(store: EventStore) -> None:
    now = [datetime.now(UTC)]
    ingest = OtlpIngest(store, default_redactor(), late_window_seconds=60, clock=lambda: now[0])
    crash = _smolagents_crash()
    ingest.receive(decode_document(crash))
    now[0] += timedelta(seconds=31)
    assert ingest.assemble().runs == 1  # failed, under a synthetic root
    now[0] += timedelta(seconds=40)
    late = span(TRACE, "3333333333333333", "Step 3", parent=MISSING, start=7, end=8)
    ingest.receive(decode_document(request(late)))
    now[0] += timedelta(seconds=2)
    ingest.assemble()
    assert ingest.pending() == (1, 1)  # a run still waiting for its root: quiet first
    now[0] += timedelta(seconds=30)
    ingest.assemble()  # revised: a step more, still no root
    now[0] += timedelta(seconds=50)  # 153 s after it became a run: past the 60 s window, which
    # a run without its root does not have (it waits for its root)
    root = span(TRACE, MISSING, "CodeAgent.run", start=0, end=9)
    root["status"] = {"code": 1}  # OK: the agent recovered
    ingest.receive(decode_document(request(root)))
    now[0] += timedelta(seconds=2)
    ingest.assemble()
    assert store.quarantined() == [] and ingest.pending() == (0, 0)
    events = [e.to_event() for e in store.read_run(run_id_for(TRACE))]
    revisions = [e for e in events if isinstance(e, RunRevised)]
    assert len(revisions) == 2 and not revisions[-1].started.synthetic_root
    assert type(events[-1]).__name__ == "RunCompleted"


# --- one trace fails alone --------------------------------------------------------------------


def test_a_trace_whose_assembly_raises_is_quarantined_and_the_others_stored(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = [f"{n:032x}" for n in range(1, 6)]
    bad = traces[2]
    real_pack = archive.pack

    def pack(spans: Any) -> bytes:
        spans = list(spans)
        if spans[0].trace_id == bad:
            raise RuntimeError("a defect no one foresaw")
        return real_pack(spans)

    real_pack_bodies = archive.pack_bodies

    def pack_bodies(bodies: Any) -> bytes:  # (a round archives the staged bodies it read)
        if any(bad in body for body in bodies):
            raise RuntimeError("a defect no one foresaw")
        return real_pack_bodies(bodies)

    monkeypatch.setattr(archive, "pack", pack)
    monkeypatch.setattr(archive, "pack_bodies", pack_bodies)
    ingest = OtlpIngest(store, default_redactor())
    for trace in traces:
        ingest.receive(decode_document(request(span(trace, A, "root", end=2))))
    report = ingest.assemble(everything=True)
    assert report.runs == 4 and ingest.pending() == (0, 0) and ingest.failed_traces == 1
    (kept,) = store.quarantined()
    assert bad in kept.location
    assert "could not be assembled: RuntimeError: a defect no one foresaw" in kept.reason
    assert decode_document(json.loads(kept.raw)).spans[0].name == "root"  # retryable as is
    assert {t for t in traces if store.version(run_id_for(t))} == set(traces) - {bad}


def test_the_assembler_loop_outlives_any_exception_and_counts_failures() -> None:
    calls: list[int] = []
    stop = threading.Event()
    seen: list[int] = []
    errors: list[str | None] = []

    def assemble() -> int:
        calls.append(1)
        if len(calls) <= 2:
            raise IndexError("list index out of range")  # what a rootless trace raised
        stop.set()
        return 1

    def record(error: str | None) -> None:  # what the assembler thread and process count
        errors.append(error)
        seen.append(0 if error is None else (seen[-1] if seen else 0) + 1)

    class NoWait:
        def is_set(self) -> bool:
            return stop.is_set()

        def wait(self, timeout: float | None = None) -> bool:
            return stop.is_set()

    assemble_until(assemble, NoWait(), record)
    assert seen == [1, 2, 0]
    assert errors[:2] == ["IndexError: list index out of range"] * 2 and errors[2] is None


# --- no acknowledgement then drop --------------------------------------------------------------


def test_a_span_resent_after_assembly_with_other_content_revises_the_run(
    store: EventStore,
) -> None:
    ingest = OtlpIngest(store, default_redactor())
    tool = span(TRACE, B, "execute_tool book", parent=A, start=1, end=2,
                gen_ai__operation__name="execute_tool", gen_ai__tool__name="book")  # fmt: skip
    root = span(TRACE, A, "invoke_agent", end=3, gen_ai__operation__name="invoke_agent")
    ingest.receive(decode_document(request(tool, root)))
    ingest.assemble(everything=True)
    run_id = run_id_for(TRACE)
    before = store.version(run_id)
    ingest.receive(decode_document(request(tool)))  # the same again: nothing changes
    ingest.assemble(everything=True)
    assert store.version(run_id) == before
    changed = span(TRACE, B, "execute_tool book", parent=A, start=1, end=2, error="SeatTaken",
                   gen_ai__operation__name="execute_tool", gen_ai__tool__name="book")  # fmt: skip
    ingest.receive(decode_document(request(changed)))
    ingest.assemble(everything=True)
    events = [e.to_event() for e in store.read_run(run_id)]
    (revised,) = [e for e in events if isinstance(e, RunRevised)]
    assert revised.reason == "1 span(s) re-sent with other content"
    calls = [e for e in events if isinstance(e, ToolCalled)]
    assert [c.status for c in calls] == ["ok", "error"]  # the first reading, then the new one
    assert store.quarantined() == [] and ingest.pending() == (0, 0)


# --- numbers no column holds -------------------------------------------------------------------


def test_a_seed_no_column_holds_quarantines_its_trace_with_the_reason(store: EventStore) -> None:
    ingest = OtlpIngest(store, default_redactor())
    ingest.receive(decode_document(request(span(TRACE, A, "agent", steplog__seed=2**63))))
    report = ingest.assemble(everything=True)
    assert report.runs == 0 and ingest.pending() == (0, 0)
    (kept,) = store.quarantined()
    assert "RunStarted.seed" in kept.reason and "less than or equal" in kept.reason


def test_map_trace_never_raises_on_the_graph() -> None:
    # every pointer shape at once: self, mutual, missing, duplicate; all mapped
    spans = _spans(
        request(
            span(TRACE, A, "a", parent=A), span(TRACE, B, "b", parent=C),
            span(TRACE, C, "c", parent=B), span(TRACE, C, "c again", parent=MISSING),
        )
    )  # fmt: skip
    run = map_trace(spans)
    assert type(run.events[-1].event).__name__ in ("RunCompleted", "RunFailed")


# --- folder imports -----------------------------------------------------------------------------


def test_a_folder_with_one_wrong_file_stores_the_others_and_says_per_file(
    store_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "trajectories"
    for name in ("a", "b", "c"):
        (folder / name).mkdir(parents=True)
        trajectory = {
            "messages": [
                {"role": "user", "content": f"task {name}"},
                {"role": "assistant", "content": "done"},
            ],
            "info": {"exit_status": "Submitted"},
        }
        (folder / name / f"{name}.traj.json").write_text(json.dumps(trajectory))
    wrong = folder / "b" / "b.traj.json"
    wrong.write_text(json.dumps(request(span(TRACE, A, "root"))))  # OTLP, not a trajectory
    result = runner.invoke(app, ["import", "mini-swe-agent", str(folder), "--db", store_url])
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{folder / 'a' / 'a.traj.json'}: 1 run(s), appended ")
    assert lines[1].startswith(f"{wrong}: refused: ") and "steplog import otlp" in lines[1]
    assert lines[2].startswith(f"{folder / 'c' / 'c.traj.json'}: 1 run(s)")
    assert lines[3].endswith("quarantined 0, refused 1 file(s)")
    store = EventStore.open(store_url)
    try:
        refresh(store)
        assert len(list_runs(store)) == 2
    finally:
        store.close()
