"""Chat message lists and mini-swe-agent trajectories become runs (`steplog import messages`,
`steplog import mini-swe-agent`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.frameworks import run_mini_swe_agent
from typer.testing import CliRunner

from steplog.cli import app
from steplog.events import (
    ModelCalled,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepAttemptFailed,
    StepFailed,
    ToolCalled,
)
from steplog.projections.queries import list_failures, list_runs, refresh
from steplog.store import EventStore

runner = CliRunner()


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def conversation(*, fail_tool: bool = False, answer: bool = True) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You book trips."},
        {"role": "user", "content": "A flight to Lisbon, please."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("c1", "search_flights", to="LIS")],
            "usage": {
                "prompt_tokens": 40,
                "completion_tokens": 9,
                "prompt_tokens_details": {"cached_tokens": 32},
            },
        },
    ]
    if fail_tool:
        messages += [
            {"role": "tool", "tool_call_id": "c1", "content": "timed out after 30 s",
             "is_error": True},
            {"role": "assistant", "content": None,
             "tool_calls": [call("c2", "search_flights", to="LIS")],
             "usage": {"prompt_tokens": 60, "completion_tokens": 9}},
        ]  # fmt: skip
    last_id = "c2" if fail_tool else "c1"
    messages.append({"role": "tool", "tool_call_id": last_id, "content": '{"flights": 3}'})
    if answer:
        messages.append(
            {
                "role": "assistant",
                "content": "Three flights found.",
                "usage": {"prompt_tokens": 80, "completion_tokens": 5},
            }
        )
    return messages


def events_of(store: EventStore, run_id: str) -> list[Any]:
    return [e.to_event() for e in store.read_run(run_id)]


def only(events: list[Any], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def imported(tmp_path: Path, name: str, content: str, *args: str) -> tuple[EventStore, Any]:
    path = tmp_path / name
    path.write_text(content)
    db = tmp_path / "store.db"
    result = runner.invoke(app, ["import", *args, str(path), "--db", str(db), "--json"])
    return EventStore.open(f"sqlite:///{db}"), result


def test_a_message_list_file_is_one_completed_run(tmp_path: Path) -> None:
    store, result = imported(
        tmp_path, "trip.json", json.dumps(conversation()), "messages", "--model", "gpt-x"
    )
    assert result.exit_code == 0, result.output
    (run_id,) = {e.run_id for e in store.read_all()}
    events = events_of(store, run_id)
    started = only(events, RunStarted)[0]
    assert (started.scenario, started.model_version, started.source) == (
        "trip",
        "gpt-x",
        "messages",
    )
    assert started.planned_steps == ["search_flights", "answer"]
    assert started.input["messages"][1]["content"] == "A flight to Lisbon, please."
    (tool,) = only(events, ToolCalled)
    assert (tool.tool, tool.args, tool.result, tool.status) == (
        "search_flights",
        {"to": "LIS"},
        {"flights": 3},
        "ok",
    )
    models = only(events, ModelCalled)
    assert [(m.input_tokens, m.output_tokens) for m in models] == [(40, 9), (80, 5)]
    assert models[0].cached_input_tokens == 32
    assert only(events, RunCompleted)[0].output == {"answer": "Three flights found."}
    again = runner.invoke(
        app, ["import", "messages", str(tmp_path / "trip.json"), "--model", "gpt-x",
              "--db", str(tmp_path / "store.db"), "--json"],
    )  # fmt: skip
    assert json.loads(again.stdout)["appended"] == 0  # idempotent
    store.close()


def test_jsonl_lines_are_runs_with_outcomes_and_failures(tmp_path: Path) -> None:
    records = [
        {"id": "ok-1", "scenario": "travel", "model": "m-1", "task_instance_id": "t-1",
         "seed": 1, "session_id": "s-1", "outcome": "success", "messages": conversation()},
        {"id": "rec-1", "scenario": "travel", "model": "m-1", "task_instance_id": "t-2",
         "messages": conversation(fail_tool=True)},
        {"id": "bad-1", "scenario": "travel", "model": "m-1", "task_instance_id": "t-3",
         "outcome": "failed",
         "error": {"type": "BookingError", "message": "seat 14C was taken",
                   "traceback": "Traceback (most recent call last): ..."},
         "messages": conversation(answer=False)},
        {"id": "cut-1", "scenario": "travel", "model": "m-1",
         "messages": conversation(answer=False)},
    ]  # fmt: skip
    store, result = imported(
        tmp_path, "runs.jsonl", "\n".join(json.dumps(r) for r in records) + "\n", "messages"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runs"] == 4
    recovered = events_of(store, "msg-rec-1")
    (attempt,) = only(recovered, StepAttemptFailed)
    assert (attempt.step, attempt.step_index, attempt.message) == (
        "search_flights",
        0,
        "timed out after 30 s",
    )
    failed_tool = only(recovered, ToolCalled)[0]
    assert (failed_tool.status, failed_tool.error) == ("error", "timed out after 30 s")
    crashed = events_of(store, "msg-bad-1")
    (run_failed,) = only(crashed, RunFailed)
    assert (run_failed.step, run_failed.error_type, run_failed.message) == (
        "search_flights",
        "BookingError",
        "seat 14C was taken",
    )
    assert run_failed.detail and run_failed.detail.startswith("Traceback")
    assert only(crashed, StepFailed)[0].attempts == 1
    unfinished = only(events_of(store, "msg-cut-1"), RunFailed)[0]
    assert unfinished.error_type == "Unfinished"
    refresh(store)
    runs = {r.run_id: r for r in list_runs(store)}
    assert runs["msg-ok-1"].status == "completed" and runs["msg-ok-1"].seed == 1
    assert runs["msg-rec-1"].status == "completed"
    assert runs["msg-bad-1"].status == "failed"
    failures = {f.error_type: f for f in list_failures(store)}
    assert failures["BookingError"].message == "seat <id> was taken"  # 14C masked as an id
    store.close()


def test_a_record_that_is_not_a_conversation_is_quarantined(tmp_path: Path) -> None:
    lines = [json.dumps({"messages": conversation()}), json.dumps({"messages": [{"x": 1}]})]
    store, result = imported(tmp_path, "mixed.jsonl", "\n".join(lines), "messages")
    assert result.exit_code == 1
    assert "line 2: message 0 has no role" in result.stderr
    assert json.loads(result.stdout)["runs"] == 1
    store.close()


# --- mini-swe-agent --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mini")
    for mode in ("ok", "recover", "crash"):
        assert run_mini_swe_agent(mode, folder).exists()
    return folder


def test_mini_swe_agent_trajectories_become_runs(trajectories: Path, tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    result = runner.invoke(
        app, ["import", "mini-swe-agent", str(trajectories), "--db", str(db), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runs"] == 3
    store = EventStore.open(f"sqlite:///{db}")
    refresh(store)
    runs = {r.task_instance_id: r for r in list_runs(store)}
    assert {k: r.status for k, r in runs.items()} == {
        "task-ok": "completed",
        "task-recover": "completed",
        "task-crash": "failed",
    }
    assert {r.model_version for r in runs.values()} == {"det-v1"}
    recover = events_of(store, runs["task-recover"].run_id)
    tools = only(recover, ToolCalled)
    assert [(t.tool, t.args, t.status) for t in tools] == [
        ("bash", {"command": "ls ./no-such-dir"}, "error"),
        ("bash", {"command": "echo hello"}, "ok"),
        ("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}, "ok"),
    ]
    assert "<returncode>0</returncode>" in tools[1].result
    (attempt,) = only(recover, StepAttemptFailed)
    assert attempt.step_index == 0 and "no-such-dir" in attempt.message
    assert sum(m.cost_usd for m in only(recover, ModelCalled)) == pytest.approx(1.25)
    crash = events_of(store, runs["task-crash"].run_id)
    (failed,) = only(crash, RunFailed)
    assert (failed.error_type, failed.message) == ("RuntimeError", "model backend exploded")
    assert failed.detail and "Traceback" in failed.detail
    (failure,) = list_failures(store)
    assert (failure.scenario, failure.error_type, failure.message) == (
        "mini-swe-agent",
        "RuntimeError",
        "model backend exploded",
    )
    store.close()
