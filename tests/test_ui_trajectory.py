"""The trajectory viewer: payloads of every source as chat messages; runs grouped into steps,
attempts and calls; imported OTLP runs rendered like harness runs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from helpers.otlp import hex_id, request, span
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from steplog.cli import app as cli
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.projections.queries import list_runs, refresh
from steplog.store import EventStore
from steplog.ui.chat import messages
from steplog.ui.trajectory import cut_at_step, trajectory

APP = Path(__file__).resolve().parent.parent / "ui" / "app.py"


# --- payloads as messages --------------------------------------------------------------------


def test_genai_semantic_convention_parts_with_a_tool_call_and_its_response() -> None:
    request_side = [
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": "weather in Lisbon?"}]},
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "c1",
                    "name": "get_weather",
                    "arguments": {"city": "Lisbon"},
                }
            ],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "19C"}]},
    ]
    found = messages(request_side, "user")
    assert [m.role for m in found] == ["system", "user", "assistant", "tool"]
    assert found[0].text == "be brief"
    assert found[2].tool_calls[0].name == "get_weather"
    assert json.loads(found[2].tool_calls[0].arguments) == {"city": "Lisbon"}
    assert found[3].text == "19C"


def test_openinference_flattened_messages_and_openai_tool_calls() -> None:
    found = messages(
        [
            {"message": {"role": "system", "content": "be brief"}},
            {
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"tool_call": {"function": {"name": "search", "arguments": '{"q": 1}'}}}
                    ],
                }
            },
        ],
        "user",
    )
    assert [m.role for m in found] == ["system", "assistant"]
    assert found[1].tool_calls[0].name == "search"
    assert found[1].tool_calls[0].arguments == '{"q": 1}'


def test_inspect_new_messages_with_a_tool_error() -> None:
    request_side = {
        "message_count": 4,
        "new_messages": [
            {"role": "user", "content": "add 2 and 2"},
            {
                "role": "tool",
                "content": "",
                "function": "add",
                "error": {"type": "parsing", "message": "bad args"},
            },
        ],
        "tools": ["add"],
    }
    found = messages(request_side, "user")
    assert [(m.role, m.name, m.error) for m in found] == [
        ("user", None, None),
        ("tool", "add", "parsing: bad args"),
    ]
    response = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": "add", "arguments": {"a": 2}}],
    }
    (reply,) = messages(response, "assistant")
    assert reply.tool_calls[0].name == "add" and json.loads(reply.tool_calls[0].arguments) == {
        "a": 2
    }


def test_anything_else_is_one_message_with_the_json_as_text() -> None:
    (found,) = messages({"instance": "i-1", "inputs": {"x": 1}}, "user")
    assert found.role == "user" and json.loads(found.text) == {
        "instance": "i-1",
        "inputs": {"x": 1},
    }
    (plain,) = messages("hello", "assistant")
    assert (plain.role, plain.text) == ("assistant", "hello")
    assert messages(None, "user") == []


# --- grouping --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def harness_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('traj')}/t.db"
    spec = get_scenario("customer-service")
    execute_all(url, plan_runs(spec, model_version="sim-v1", runs=15, seed=0))
    return url


def test_every_call_lands_in_its_step_and_attempt(harness_url: str) -> None:
    store = EventStore.open(harness_url)
    refresh(store)
    run_id = next(r.run_id for r in list_runs(store, limit=100) if r.retries)
    events = store.read_run(run_id)
    found = trajectory(events)
    calls = [e for e in events if e.type in ("ModelCalled", "ToolCalled", "ClockRead")]
    grouped = [
        entry.event
        for step in found.steps
        for attempt in step.attempts
        for entry in attempt.entries
        if entry.kind in ("model", "tool", "clock")
    ]
    assert sorted(e.seq for e in grouped) == sorted(e.seq for e in calls)
    for step in found.steps:
        for entry in (e for a in step.attempts for e in a.entries):
            assert entry.payload.get("step_index", step.index) == step.index
    retried = [s for s in found.steps if len(s.attempts) > 1]
    assert retried, "a run with retries has a step with several attempts"
    started = [
        (e.payload["step_index"], e.payload["attempt"]) for e in events if e.type == "StepStarted"
    ]
    assert sorted((s.index, a.number) for s in found.steps for a in s.attempts) == sorted(started)
    assert [e.event.seq for e in found.errors] == sorted(e.event.seq for e in found.errors)
    assert len(trajectory(cut_at_step(events, 0)).steps) == 1


# --- an imported run renders like any other ---------------------------------------------------


def test_an_otlp_run_renders_as_a_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(3)
    trace, root, chat = hex_id(rng, 16), hex_id(rng, 8), hex_id(rng, 8)
    inputs = [
        {"role": "system", "parts": [{"type": "text", "content": "You plan trips."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Fly me to Lisbon"}]},
    ]
    outputs = [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "name": "search_flights", "arguments": {"to": "LIS"}}],
        }
    ]
    document = request(
        span(
            trace,
            chat,
            "chat gpt-4o",
            parent=root,
            start=1,
            end=5,
            error="RateLimitError",
            message="429 slow down",
            gen_ai__operation__name="chat",
            gen_ai__request__model="gpt-4o",
            gen_ai__input__messages=json.dumps(inputs),
            gen_ai__output__messages=json.dumps(outputs),
        ),
        span(
            trace,
            root,
            "invoke_agent planner",
            start=0,
            end=10,
            error="RateLimitError",
            gen_ai__operation__name="invoke_agent",
            gen_ai__request__model="gpt-4o",
        ),
    )
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    url = f"sqlite:///{tmp_path}/otlp.db"
    result = CliRunner().invoke(cli, ["import", "otlp", str(path), "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    store = EventStore.open(url)
    refresh(store)
    (run,) = list_runs(store)
    monkeypatch.setenv("STEPLOG_DATABASE_URL", url)
    app = AppTest.from_file(str(APP), default_timeout=60)
    app.switch_page("views/run.py")
    app.query_params["run"] = run.run_id
    app.run()
    assert not app.exception, app.exception
    roles = [m.name for m in app.chat_message]
    assert roles[:3] == ["system", "user", "assistant"], roles
    shown = " ".join(c.value for c in app.text)
    assert "Fly me to Lisbon" in shown and "You plan trips." in shown
    assert any("search" in m.value for m in app.markdown if "tool call" in m.value)
    assert any("429 slow down" in e.value for e in app.error)
