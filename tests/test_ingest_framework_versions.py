"""More real frameworks, and two model versions of each compared.

``opentelemetry-util-genai`` (the telemetry handler GenAI instrumentations are built on) gets
the three runs every framework gets in ``test_ingest_frameworks.py``; the raw OTel SDK gets its
plain completed run. Then each framework runs three task instances under two versions -- the
first recovers from the tool error on two of them and crashes on the third, the second crashes
on all three -- and the failure library must hold ONE signature across both versions (no
traceback, no model name in it), and ``compare`` must pair the runs by task instance.
(pydantic-ai and Inspect AI have this check beside their other tests.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.frameworks import (
    Capture,
    instrument_openai_agents,
    run_langgraph,
    run_mini_swe_agent,
    run_openai_agents,
    run_raw_otel,
    run_util_genai,
)
from typer.testing import CliRunner

from steplog.cli import app
from steplog.compare import compare
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
from steplog.projections.signature import signature_of
from steplog.store import EventStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    opened = EventStore.open(f"sqlite:///{tmp_path}/store.db")
    yield opened
    opened.close()


def events(store: EventStore, run_id: str) -> list[Any]:
    return [e.to_event() for e in store.read_run(run_id)]


def only(found: list[Any], kind: type[Any]) -> list[Any]:
    return [e for e in found if isinstance(e, kind)]


def one_run(capture: Capture, store: EventStore) -> list[Any]:
    (run_id,) = capture.ingest(store)
    return events(store, run_id)


# --- opentelemetry-util-genai ----------------------------------------------------------------


def test_util_genai_completes(store: EventStore) -> None:
    capture = Capture()
    run_util_genai(capture, "ok", version="m-v1", instance="u-1")
    run = one_run(capture, store)
    (started,) = only(run, RunStarted)
    assert (started.scenario, started.task_instance_id, started.model_version) == (
        "weather",
        "u-1",
        "m-v1",
    )
    assert started.session_id == "conv-u-1"  # gen_ai.conversation.id
    assert started.planned_steps == ["chat", "execute_tool lookup", "chat"]
    (tool,) = only(run, ToolCalled)
    assert (tool.tool, tool.args, tool.result, tool.status) == (
        "lookup",
        {"city": "Lisbon"},
        "sunny in Lisbon",
        "ok",
    )
    models = only(run, ModelCalled)
    assert [(m.model, m.input_tokens, m.output_tokens) for m in models] == [
        ("m-v1", 10, 5),
        ("m-v1", 20, 4),
    ]
    assert models[1].cached_input_tokens == 8
    assert only(run, RunCompleted) and not only(run, StepAttemptFailed)


def test_util_genai_tool_error_recovered_is_a_failed_attempt(store: EventStore) -> None:
    capture = Capture()
    run_util_genai(capture, "recover", version="m-v1", instance="u-2")
    run = one_run(capture, store)
    assert only(run, RunStarted)[0].planned_steps == [
        "chat",
        "execute_tool lookup",
        "chat",
        "execute_tool lookup",
        "chat",
    ]
    failed_call, ok_call = only(run, ToolCalled)
    # util-genai puts the message in the span status and the class in error.type
    assert (failed_call.args, failed_call.status, failed_call.error_type) == (
        {"city": "Atlantis"},
        "error",
        "ValueError",
    )
    assert failed_call.error == "no such city: Atlantis"
    assert (ok_call.args, ok_call.status) == ({"city": "Lisbon"}, "ok")
    (attempt,) = only(run, StepAttemptFailed)
    assert (attempt.step, attempt.step_index, attempt.error_type, attempt.message) == (
        "execute_tool lookup",
        1,
        "ValueError",
        "no such city: Atlantis",
    )
    refresh(store)
    (summary,) = list_runs(store)
    assert summary.status == "completed" and summary.tokens == 15 + 15 + 24
    assert summary.mid_run_errors == 1 and summary.mid_run_recovered == 1


def test_util_genai_model_crash_fails_the_run(store: EventStore) -> None:
    capture = Capture()
    run_util_genai(capture, "crash", version="m-v1", instance="u-3")
    run = one_run(capture, store)
    (failed,) = only(run, RunFailed)
    assert (failed.step, failed.step_index) == ("chat", 2)
    assert (failed.error_type, failed.message) == ("RuntimeError", "model backend exploded")
    (step_failed,) = only(run, StepFailed)
    assert step_failed.step_index == 2
    refresh(store)
    (failure,) = list_failures(store)
    assert (
        failure.signature
        == signature_of("weather", "chat", "RuntimeError", "model backend exploded").id
    )


def test_raw_otel_sdk_completes(store: EventStore) -> None:
    capture = Capture()
    run_raw_otel(capture, "ok", version="gpt-x", instance="r-2")
    run = one_run(capture, store)
    (started,) = only(run, RunStarted)
    assert (started.scenario, started.task_instance_id, started.model_version) == (
        "planner",
        "r-2",
        "gpt-x",
    )
    assert started.planned_steps == ["chat", "execute_tool fetch", "chat"]
    (tool,) = only(run, ToolCalled)
    assert (tool.args, tool.status) == ({"url": "http://example.invalid/1"}, "ok")
    assert [(m.input_tokens, m.output_tokens) for m in only(run, ModelCalled)] == [(100, 20)] * 2
    assert only(run, RunCompleted) and not only(run, StepAttemptFailed)


# --- two versions of every framework ---------------------------------------------------------


@pytest.fixture(scope="module")
def langchain_instrumented() -> Iterator[Capture]:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    capture = Capture()
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    instrumentor.uninstrument()


@pytest.fixture(scope="module")
def agents_instrumented() -> Iterator[Capture]:
    capture = Capture()
    instrumentor = instrument_openai_agents(capture)
    yield capture
    instrumentor.uninstrument()


def _agents(capture: Capture, mode: str, *, version: str, instance: str) -> None:
    attributes = {"steplog.task_instance_id": instance, "steplog.seed": 1}
    with capture.root(**attributes):  # the Agents SDK has no slot for them
        run_openai_agents(capture, mode, version=version, instance=instance)


# framework: (driver, the capture it needs, scenario, the crash's step, type and message)
Driver = Callable[..., None]
FRAMEWORKS: dict[str, tuple[Driver, str | None, str, str, str, str]] = {
    "raw-otel": (
        run_raw_otel,
        None,
        "planner",
        "execute_tool fetch",
        "ConnectionError",
        "fetch failed after 3 tries",
    ),
    "util-genai": (
        run_util_genai,
        None,
        "weather",
        "chat",
        "RuntimeError",
        "model backend exploded",
    ),
    "langgraph": (
        run_langgraph,
        "langchain_instrumented",
        "weather",
        "tools",
        "ValueError",
        "no such city: Atlantis",
    ),
    "openai-agents": (
        _agents,
        "agents_instrumented",
        "weather",
        "turn",
        "Error in agent run",
        "model backend exploded",
    ),
}
PLAN = {  # (instance, version) -> mode
    **{(i, "v1"): "recover" for i in ("a", "b")},
    ("c", "v1"): "crash",
    **{(i, "v2"): "crash" for i in ("a", "b", "c")},
}


def _check_versions(
    store: EventStore, scenario: str, step: str, kind: str, message: str, *, paired: bool = True
) -> None:
    refresh(store)
    runs = list_runs(store, limit=100)
    assert sorted((r.task_instance_id, r.model_version, r.status) for r in runs) == sorted(
        (i, v, "completed" if mode == "recover" else "failed") for (i, v), mode in PLAN.items()
    )
    (failure,) = list_failures(store)  # one signature for both versions
    assert (failure.scenario, failure.step, failure.error_type, failure.message) == (
        scenario,
        step,
        kind,
        message.replace("3", "<n>"),
    )
    assert failure.signature == signature_of(scenario, step, kind, message).id
    assert failure.counts_by_version == {"v1": 1, "v2": 3}
    mode = "on" if paired else "auto"  # three pairs are too few for "auto" to choose pairing
    report = compare(
        store, baseline="v1", candidate="v2", scenario=scenario, paired_mode=mode
    ).as_dict()
    assert (report["baseline"]["runs"], report["baseline"]["completed"]) == (3, 2)
    assert (report["candidate"]["runs"], report["candidate"]["completed"]) == (3, 0)
    if not paired:  # no seed: the runs are compared as independent samples
        assert report["pairing"]["matched_items"] == 0
        return
    assert report["pairing"]["matched_items"] == 3  # paired by (task instance, seed)
    assert report["paired"]["baseline_only"] == 2 and report["paired"]["candidate_only"] == 0


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_two_versions_share_one_signature_and_compare(
    framework: str, store: EventStore, request: pytest.FixtureRequest
) -> None:
    driver, fixture, scenario, step, kind, message = FRAMEWORKS[framework]
    capture = request.getfixturevalue(fixture) if fixture else Capture()
    for (instance, version), mode in PLAN.items():
        driver(capture, mode, version=version, instance=instance)
    assert len(capture.ingest(store)) == len(PLAN)
    _check_versions(store, scenario, step, kind, message)


def test_mini_swe_agent_versions_share_one_signature_and_compare(tmp_path: Path) -> None:
    folder = tmp_path / "trajectories"
    for (instance, version), mode in PLAN.items():
        run_mini_swe_agent(mode, folder / version, version=version, instance=instance)
    db = tmp_path / "mini.db"
    result = CliRunner().invoke(
        app, ["import", "mini-swe-agent", str(folder), "--db", str(db), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runs"] == len(PLAN)
    opened = EventStore.open(f"sqlite:///{db}")
    try:
        refresh(opened)
        (failure,) = list_failures(opened)
        # a trajectory names its instance but no seed, so the versions are not paired
        crash = ("mini-swe-agent", failure.step, "RuntimeError", "model backend exploded")
        _check_versions(opened, *crash, paired=False)
    finally:
        opened.close()
