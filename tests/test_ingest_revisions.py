"""Stored traces are kept (compressed) and can be mapped again: `steplog reassemble` revises the
runs whose reading changed, through new events, and is idempotent; the library follows."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from helpers.children import reap, spawn
from helpers.otlp import hex_id, request, span
from sqlalchemy import select
from typer.testing import CliRunner

from steplog.cli import app
from steplog.events import RunRevised
from steplog.ingest.otlp import genai
from steplog.ingest.otlp.archive import load
from steplog.models import archived_traces_table
from steplog.projections.library import LibraryProjection
from steplog.projections.queries import list_failures, list_runs, refresh
from steplog.store import EventStore

runner = CliRunner()


def failing_chat(rng: random.Random, version: str) -> list[dict[str, Any]]:
    trace, root, chat = hex_id(rng, 16), hex_id(rng, 8), hex_id(rng, 8)
    return [
        span(
            trace,
            chat,
            f"chat {version}",
            parent=root,
            start=1,
            end=5,
            error="RateLimitError",
            message="rate limited, retry in 20 s",
            gen_ai__operation__name="chat",
            gen_ai__request__model=version,
        ),
        span(
            trace,
            root,
            "invoke_agent planner",
            start=0,
            end=6,
            error="RateLimitError",
            gen_ai__operation__name="invoke_agent",
            gen_ai__agent__name="planner",
        ),
    ]


def old_step_name(span: Any) -> str:
    """How steps were named before issue 13: by span name (``chat gpt-a``)."""
    return span.name or "(unnamed)"


def signatures(store: EventStore) -> dict[str, int]:
    refresh(store)
    return {f.step: f.count for f in list_failures(store)}


def test_reassemble_revises_runs_mapped_the_old_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(13)
    path = tmp_path / "traces.jsonl"
    lines = [request(*failing_chat(rng, v)) for v in ("gpt-a", "gpt-b")]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    db = tmp_path / "store.db"
    with monkeypatch.context() as patched:
        patched.setattr(genai, "step_name", old_step_name)
        result = runner.invoke(app, ["import", "otlp", str(path), "--db", str(db)])
        assert result.exit_code == 0, result.output
    store = EventStore.open(f"sqlite:///{db}")
    assert signatures(store) == {"chat gpt-a": 1, "chat gpt-b": 1}  # one failure split in two

    with store.engine.connect() as conn:
        rows = conn.execute(select(archived_traces_table.c.span_count)).all()
    assert sorted(rows) == [(2,), (2,)]  # every span kept (compressed) after assembly

    result = runner.invoke(app, ["reassemble", "--all", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["revised"] == 2
    assert signatures(store) == {"chat": 2}  # one signature now, the old ones gone
    refresh(store)
    assert {r.failed_step for r in list_runs(store)} == {"chat"}
    run_id = next(iter({e.run_id for e in store.read_all()}))
    revisions = [e.to_event() for e in store.read_run(run_id) if e.type == "RunRevised"]
    assert [(r.revision, r.started.planned_steps) for r in revisions] == [(1, ["chat"])]

    again = runner.invoke(app, ["reassemble", "--all", "--db", str(db), "--json"])
    assert json.loads(again.stdout) | {"revised_runs": []} == {
        "revised": 0,
        "unchanged": 2,
        "missing": [],
        "failed": [],
        "revised_runs": [],
    }  # idempotent
    before = [(f.signature, f.count, f.counts_by_version) for f in list_failures(store)]
    LibraryProjection(store).rebuild()  # rebuilding from the log gives the same library
    after = [(f.signature, f.count, f.counts_by_version) for f in list_failures(store)]
    assert after == before
    store.close()


def test_reassemble_names_what_it_cannot_find(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    EventStore.open(f"sqlite:///{db}").close()
    missing = "ab" * 16
    result = runner.invoke(app, ["reassemble", "--trace", missing, "--db", str(db)])
    assert result.exit_code == 1
    assert f"trace {missing}: no stored spans" in result.stderr
    neither = runner.invoke(app, ["reassemble", "--db", str(db)])
    assert neither.exit_code == 1 and "--trace ID" in neither.stderr


def test_a_revised_run_that_now_completes_leaves_the_library(store: EventStore) -> None:
    from steplog.ingest.otlp.pipeline import OtlpIngest
    from steplog.ingest.otlp.spans import decode_document
    from steplog.ingest.redaction import default_redactor

    rng = random.Random(21)
    chat, root = failing_chat(rng, "gpt-a")
    root_ok = {**root, "status": {"code": 1}, "attributes": root["attributes"][:-1]}
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0)
    ingest.receive(decode_document(request(root_ok)))  # the root first, alone: a run of 0 steps
    ingest.assemble(everything=True)
    assert signatures(store) == {}
    ingest.receive(decode_document(request(chat)))  # the failed chat arrives late
    ingest.assemble(everything=True)
    (run_id,) = {e.run_id for e in store.read_all()}
    assert any(isinstance(e.to_event(), RunRevised) for e in store.read_run(run_id))
    # the root said OK: the chat error was recovered from, so still no failure
    assert signatures(store) == {}
    assert load(store, [chat["traceId"]])[chat["traceId"]].spans[-1].name == "chat gpt-a"


def test_a_trace_with_a_lost_span_is_incomplete_until_it_arrives(tmp_path: Path) -> None:
    from steplog.ingest.otlp.pipeline import OtlpIngest
    from steplog.ingest.otlp.spans import decode_document
    from steplog.ingest.redaction import default_redactor

    rng = random.Random(34)
    trace, root, chat, turn, tool = (hex_id(rng, 16), *(hex_id(rng, 8) for _ in range(4)))
    spans = [
        span(trace, root, "invoke_agent planner", start=0, end=10, steplog__session_id="s-9"),
        span(trace, chat, "chat", parent=root, start=1, end=2, gen_ai__operation__name="chat"),
        span(trace, tool, "execute_tool book", parent=turn, start=4, end=5,
             gen_ai__operation__name="execute_tool", gen_ai__tool__name="book"),
    ]  # fmt: skip
    db = tmp_path / "store.db"
    store = EventStore.open(f"sqlite:///{db}")
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0)
    ingest.receive(decode_document(request(*spans)))  # the "turn" span was lost on the way
    ingest.assemble(everything=True)
    refresh(store)
    (run,) = list_runs(store, session="s-9")
    assert run.incomplete is True
    shown = runner.invoke(app, ["runs", "--session", "s-9", "--db", str(db)])
    assert "completed (incomplete)" in shown.stdout
    (started,) = [e.to_event() for e in store.read_run(run.run_id)][:1]
    assert started.gaps == [  # type: ignore[attr-defined]
        f"span {tool} ('execute_tool book'): its parent {turn} never arrived"
    ]
    lost = span(trace, turn, "turn", parent=root, start=3, end=6)
    ingest.receive(decode_document(request(lost)))  # it turns up after all
    ingest.assemble()
    refresh(store)
    (run,) = list_runs(store, session="s-9")
    assert run.incomplete is False and run.steps_planned == 2
    store.close()


def test_the_run_page_shows_an_incomplete_run_and_its_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamlit.testing.v1 import AppTest

    rng = random.Random(35)
    trace, root, tool = hex_id(rng, 16), hex_id(rng, 8), hex_id(rng, 8)
    path = tmp_path / "trace.json"
    spans = [
        span(trace, root, "invoke_agent planner", start=0, end=10, session__id="s10"),
        span(trace, tool, "execute_tool book", parent="ab" * 8, start=4, end=5,
             gen_ai__operation__name="execute_tool", gen_ai__tool__name="book"),
    ]  # fmt: skip
    path.write_text(json.dumps(request(*spans)))
    db = tmp_path / "store.db"
    assert runner.invoke(app, ["import", "otlp", str(path), "--db", str(db)]).exit_code == 0
    monkeypatch.setenv("STEPLOG_DATABASE_URL", f"sqlite:///{db}")
    entry = Path(__file__).resolve().parent.parent / "ui" / "app.py"
    page = AppTest.from_file(str(entry), default_timeout=60)
    page.switch_page("views/run.py")  # through the app, so its links to other pages resolve
    page.query_params["run"] = f"otel-{trace}"
    page.run()
    assert not page.exception, page.exception
    (warning,) = page.warning
    assert "Incomplete" in str(warning.value) and "never arrived" in str(warning.value)
    assert any("session s10" in str(c.value) for c in page.caption)


# --- a drill: two processes export one trace, the second well after the run was stored -------

_PROCESS = """
import sys
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

endpoint, role = sys.argv[1], sys.argv[2]
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
tracer = provider.get_tracer("drill")
if role == "root":
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}
    with tracer.start_as_current_span("invoke_agent planner", attributes=attrs) as root:
        chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m-1"}
        with tracer.start_as_current_span("chat m-1", attributes=chat):
            pass
        context = root.get_span_context()
        print(f"{context.trace_id:032x} {context.span_id:016x}", flush=True)
else:
    trace_id, span_id = (int(x, 16) for x in sys.argv[3:5])
    parent = NonRecordingSpan(SpanContext(trace_id, span_id, True, TraceFlags(1)))
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "book",
            "gen_ai.tool.call.arguments": '{"seat": "14C"}'}
    with tracer.start_as_current_span(
        "execute_tool book", context=trace.set_span_in_context(parent), attributes=tool
    ) as span:
        span.set_status(trace.Status(trace.StatusCode.ERROR, "seat taken"))
provider.shutdown()  # every export acknowledged (200) before this returns
"""


def test_a_second_process_exporting_late_revises_the_run(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    db = tmp_path / "store.db"
    server = spawn(
        [sys.executable, "-m", "steplog.cli", "serve", "--db", str(db), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    endpoint = f"http://127.0.0.1:{port}/v1/traces"

    def wait_for(condition: Any) -> None:
        deadline = time.monotonic() + 30
        while not condition():
            assert time.monotonic() < deadline, "not reached within 30 s"
            time.sleep(0.1)

    try:
        assert server.stdout is not None and endpoint in server.stdout.readline()
        first = subprocess.run(
            [sys.executable, "-c", _PROCESS, endpoint, "root"],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        trace_id, root_id = first.stdout.split()
        store = EventStore.open(f"sqlite:///{db}")
        wait_for(lambda: store.count_runs() == 1)
        run_id = f"otel-{trace_id}"
        refresh(store)
        assert list_runs(store)[0].status == "completed"  # as far as it knows
        subprocess.run(
            [sys.executable, "-c", _PROCESS, endpoint, "child", trace_id, root_id],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        wait_for(lambda: any(e.type == "RunRevised" for e in store.read_run(run_id)))
        wait_for(lambda: store.read_run(run_id)[-1].type in ("RunCompleted", "RunFailed"))
        refresh(store)
        (run,) = list_runs(store)
        assert (run.status, run.failed_step, run.failure_message) == (
            "failed",
            "execute_tool book",
            "seat taken",
        )  # the late tool span was the last step, in error: the run ends failed
        assert store.quarantined() == []
        store.close()
    finally:
        server.terminate()
        try:
            server.communicate(timeout=30)
        finally:
            reap(server)
