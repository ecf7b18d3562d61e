"""Real agent frameworks' traces become faithful runs.

Each framework is driven offline by a scripted model (see ``helpers/frameworks.py``); its spans
are captured in memory and sent through the receiver's path (OTLP protobuf, decode, stage,
assemble). For each: a run that completes, one whose tool fails and recovers, one that
crashes; and two model versions compare.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers.frameworks import (
    Capture,
    instrument_openai_agents,
    run_langgraph,
    run_openai_agents,
    run_pydantic_ai,
    run_raw_otel,
)

from steplog import compare
from steplog.events import (
    ModelCalled,
    RunFailed,
    RunStarted,
    StepAttemptFailed,
    StepFailed,
    ToolCalled,
)
from steplog.projections.queries import list_failures, list_runs, refresh
from steplog.store import EventStore


@pytest.fixture
def sqlite_store(tmp_path: Any) -> Iterator[EventStore]:
    store = EventStore.open(f"sqlite:///{tmp_path}/store.db")
    yield store
    store.close()


class Run:
    """The stored events of one run, by type."""

    def __init__(self, store: EventStore, run_id: str) -> None:
        self.events = [e.to_event() for e in store.read_run(run_id)]
        refresh(store)
        (self.summary,) = [r for r in list_runs(store, limit=1000) if r.run_id == run_id]

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    @property
    def steps(self) -> list[str]:
        return list(self.of(RunStarted)[0].planned_steps)

    @property
    def tools(self) -> list[ToolCalled]:
        return self.of(ToolCalled)


def one_run(capture: Capture, store: EventStore) -> Run:
    (run_id,) = capture.ingest(store)
    return Run(store, run_id)


# --- LangGraph + OpenInference ---------------------------------------------------------------


@pytest.fixture(scope="module")
def langchain_capture() -> Iterator[Capture]:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    capture = Capture()
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    yield capture
    instrumentor.uninstrument()


def test_langgraph_completes_below_ones_own_root_span(
    langchain_capture: Capture, sqlite_store: EventStore
) -> None:
    run_langgraph(langchain_capture, "ok", version="fake-v1", instance="t-1")
    run = one_run(langchain_capture, sqlite_store)
    started = run.of(RunStarted)[0]
    assert (started.scenario, started.task_instance_id, started.model_version) == (
        "weather",
        "t-1",
        "fake-v1",
    )
    assert started.session_id == "session-t-1"
    # not one step (the wrapper root and the LangGraph chain are descended through)
    assert run.steps == ["agent", "tools", "agent"]
    assert [t.args for t in run.tools] == [{"city": "Lisbon"}]
    assert run.tools[0].status == "ok"
    assert [(m.input_tokens, m.output_tokens) for m in run.of(ModelCalled)] == [(10, 5), (20, 4)]
    assert run.summary.status == "completed" and run.summary.tokens == 39


def test_langgraph_tool_error_recovered_is_a_failed_attempt(
    langchain_capture: Capture, sqlite_store: EventStore
) -> None:
    run_langgraph(langchain_capture, "recover", version="fake-v1", instance="t-2")
    run = one_run(langchain_capture, sqlite_store)
    assert run.steps == ["agent", "tools", "agent", "tools", "agent"]
    failed_call, ok_call = run.tools
    assert failed_call.args == {"city": "Atlantis"}
    assert (failed_call.status, failed_call.error_type) == ("error", "ValueError")
    assert failed_call.error == "no such city: Atlantis"
    (attempt,) = run.of(StepAttemptFailed)
    assert (attempt.step, attempt.step_index, attempt.error_type) == ("tools", 1, "ValueError")
    assert attempt.message == "no such city: Atlantis"
    assert attempt.detail and "Traceback" in attempt.detail
    assert ok_call.args == {"city": "Lisbon"} and ok_call.status == "ok"
    assert run.summary.status == "completed"
    assert run.summary.mid_run_errors == 1 and run.summary.mid_run_recovered == 1


def test_langgraph_crash_fails_the_run_with_the_exception_not_a_traceback(
    langchain_capture: Capture, sqlite_store: EventStore
) -> None:
    run_langgraph(langchain_capture, "crash", version="fake-v1", instance="t-3")
    run = one_run(langchain_capture, sqlite_store)
    (failed,) = run.of(RunFailed)
    assert (failed.step, failed.step_index) == ("tools", 1)
    assert (failed.error_type, failed.message) == ("ValueError", "no such city: Atlantis")
    assert failed.detail and "Traceback (most recent call last)" in failed.detail
    (step_failed,) = run.of(StepFailed)
    assert step_failed.attempts == 1 and step_failed.message == "no such city: Atlantis"
    refresh(sqlite_store)
    (failure,) = list_failures(sqlite_store)
    assert (failure.scenario, failure.step, failure.error_type) == (
        "weather",
        "tools",
        "ValueError",
    )
    assert failure.message == "no such city: Atlantis"


# --- pydantic-ai -----------------------------------------------------------------------------


def test_pydantic_ai_completes(sqlite_store: EventStore) -> None:
    capture = Capture()
    run_pydantic_ai(capture, "ok", version="fn-v1", instance="p-1")
    run = one_run(capture, sqlite_store)
    started = run.of(RunStarted)[0]
    assert (started.scenario, started.model_version) == ("weather", "fn-v1")
    assert started.session_id  # gen_ai.conversation.id
    assert run.steps == ["chat", "execute_tool lookup", "chat"]  # not "chat fn-v1"
    assert [t.args for t in run.tools] == [{"city": "Lisbon"}]
    models = run.of(ModelCalled)
    assert [(m.model, m.input_tokens, m.output_tokens) for m in models] == [
        ("fn-v1", 10, 5),
        ("fn-v1", 20, 4),
    ]
    assert models[1].cached_input_tokens == 8
    assert run.summary.status == "completed"


def test_pydantic_ai_tool_retry_is_a_failed_attempt(sqlite_store: EventStore) -> None:
    capture = Capture()
    run_pydantic_ai(capture, "recover", version="fn-v1", instance="p-2")
    run = one_run(capture, sqlite_store)
    assert run.steps == ["chat", "execute_tool lookup", "chat", "execute_tool lookup", "chat"]
    failed_call = run.tools[0]
    assert (failed_call.args, failed_call.status) == ({"city": "Atlantis"}, "error")
    assert failed_call.error == "no such city: Atlantis"
    (attempt,) = run.of(StepAttemptFailed)
    assert (attempt.step_index, attempt.message) == (1, "no such city: Atlantis")
    assert attempt.error_type.endswith("ToolRetryError")
    assert run.summary.status == "completed" and run.summary.mid_run_recovered == 1


def test_pydantic_ai_model_crash_fails_the_run(sqlite_store: EventStore) -> None:
    capture = Capture()
    run_pydantic_ai(capture, "crash", version="fn-v1", instance="p-3")
    run = one_run(capture, sqlite_store)
    (failed,) = run.of(RunFailed)
    assert (failed.step, failed.step_index) == ("chat", 2)
    assert (failed.error_type, failed.message) == ("RuntimeError", "model backend exploded")
    refresh(sqlite_store)
    (failure,) = list_failures(sqlite_store)
    assert (failure.step, failure.error_type, failure.message) == (
        "chat",
        "RuntimeError",
        "model backend exploded",
    )


def test_pydantic_ai_versions_share_signatures_and_compare(sqlite_store: EventStore) -> None:
    capture = Capture()
    for instance in ("p-a", "p-b", "p-c"):
        run_pydantic_ai(capture, "recover", version="fn-v1", instance=instance)
        run_pydantic_ai(capture, "crash", version="fn-v2", instance=instance)
    assert len(capture.ingest(sqlite_store)) == 6
    refresh(sqlite_store)
    (failure,) = list_failures(sqlite_store)  # one signature, not one per model version
    assert failure.count == 3
    assert compare.comparable(sqlite_store) == [("weather", "fn-v1"), ("weather", "fn-v2")]
    baseline, candidate = compare.load_runs(sqlite_store, "fn-v1", "fn-v2", scenario="weather")
    assert (baseline.completed_count, len(baseline)) == (3, 3)
    assert (candidate.completed_count, len(candidate)) == (0, 3)
    pairs = compare.pair_up(baseline, candidate)  # paired on (task instance, seed)
    assert len(pairs.baseline) == 3


# --- OpenAI Agents SDK + OpenInference -------------------------------------------------------


@pytest.fixture(scope="module")
def agents_capture() -> Iterator[Capture]:
    capture = Capture()
    instrumentor = instrument_openai_agents(capture)
    yield capture
    instrumentor.uninstrument()


def test_openai_agents_completes_with_a_step_per_turn(
    agents_capture: Capture, sqlite_store: EventStore
) -> None:
    run_openai_agents(agents_capture, "ok", version="scripted-v1", instance="o-1")
    run = one_run(agents_capture, sqlite_store)
    started = run.of(RunStarted)[0]
    assert (started.scenario, started.model_version) == ("weather", "scripted-v1")
    # root -> chain -> agent -> turns: the turns are the steps, not "Agent workflow"
    assert run.steps == ["turn", "turn"]
    assert [t.args for t in run.tools] == [{"city": "Lisbon"}]
    assert [(m.input_tokens, m.output_tokens) for m in run.of(ModelCalled)] == [(10, 5)] * 2
    assert run.summary.status == "completed"


def test_openai_agents_tool_error_is_a_failed_attempt(
    agents_capture: Capture, sqlite_store: EventStore
) -> None:
    run_openai_agents(agents_capture, "recover", version="scripted-v1", instance="o-2")
    run = one_run(agents_capture, sqlite_store)
    assert run.steps == ["turn", "turn", "turn"]
    failed_call = run.tools[0]
    assert (failed_call.tool, failed_call.args, failed_call.status) == (
        "lookup",
        {"city": "Atlantis"},
        "error",
    )
    (attempt,) = run.of(StepAttemptFailed)
    assert attempt.step_index == 0
    assert attempt.error_type == "Error running tool (non-fatal)"
    assert attempt.message == "Tool execution failed. Error details are redacted."
    assert run.summary.status == "completed"
    assert run.summary.first_step_correct is False  # the failed attempt was in step 0


def test_openai_agents_crash_is_a_failed_run(
    agents_capture: Capture, sqlite_store: EventStore
) -> None:
    run_openai_agents(agents_capture, "crash", version="scripted-v1", instance="o-3")
    run = one_run(agents_capture, sqlite_store)
    (failed,) = run.of(RunFailed)  # the AGENT span errored below a root that says nothing
    assert (failed.step, failed.step_index) == ("turn", 1)
    assert failed.error_type == "Error in agent run"
    assert failed.message == "model backend exploded"
    assert run.summary.status == "failed"
    refresh(sqlite_store)
    (failure,) = list_failures(sqlite_store)
    assert failure.message == "model backend exploded"


# --- the raw OpenTelemetry SDK, GenAI conventions ---------------------------------------------


def test_raw_otel_sdk_keeps_cost_cache_reasoning_and_ids(sqlite_store: EventStore) -> None:
    capture = Capture()
    run_raw_otel(capture, "recover")
    run = one_run(capture, sqlite_store)
    started = run.of(RunStarted)[0]
    assert (started.scenario, started.task_instance_id) == ("planner", "r-1")
    assert (started.session_id, started.user_id) == ("conv-r-1", "user-9")
    assert run.steps == ["chat", "execute_tool fetch", "chat"]
    model = run.of(ModelCalled)[0]
    assert (model.cached_input_tokens, model.reasoning_tokens, model.cost_usd) == (64, 12, 0.0125)
    (attempt,) = run.of(StepAttemptFailed)
    assert (attempt.error_type, attempt.message) == (
        "ConnectionError",
        "fetch failed after 3 tries",
    )
    assert attempt.detail and "Traceback" in attempt.detail
    assert run.summary.status == "completed"
    assert run.summary.cost_usd == pytest.approx(0.025)
    assert [r.run_id for r in list_runs(sqlite_store, session="conv-r-1")] == [
        run.summary.run_id
    ]  # sessions group runs


def test_raw_otel_sdk_agent_error_fails_the_run(sqlite_store: EventStore) -> None:
    capture = Capture()
    run_raw_otel(capture, "crash")
    run = one_run(capture, sqlite_store)
    (failed,) = run.of(RunFailed)
    assert (failed.step, failed.error_type) == ("execute_tool fetch", "ConnectionError")
    assert failed.message == "fetch failed after 3 tries"
    refresh(sqlite_store)
    (failure,) = list_failures(sqlite_store)
    assert failure.message == "fetch failed after <n> tries"
