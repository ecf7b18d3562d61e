"""The mapping by convention, on the span shapes real instrumentations emit (``helpers.shapes``):
one real request is one call, a trace with no activity is not a run, content comes from events
as well as attributes, tool arguments come out of call envelopes, steps are where the activity
is, and a wrapper span's error is one attempt with the call it came from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import shapes
from hypothesis import given
from hypothesis import strategies as st

from steplog.events import (
    ModelCalled,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepAttemptFailed,
    StepFailed,
    StepStarted,
    ToolCalled,
)
from steplog.ingest.otlp import archive, attributes
from steplog.ingest.otlp.genai import map_trace, run_id_for
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.span_model import DecodedRequest, Span
from steplog.ingest.redaction import default_redactor
from steplog.projections.signature import signature_of
from steplog.store import EventStore


def mapped(spans: list[Span]) -> list[Any]:
    return [e.event for e in map_trace(spans).events]


def only(events: list[Any], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    opened = EventStore.open(f"sqlite:///{tmp_path}/store.db")
    yield opened
    opened.close()


def send(store: EventStore, spans: list[Span]) -> Any:
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    received = ingest.receive(DecodedRequest(spans=list(spans)))
    assert not received.rejected
    return ingest.assemble(everything=True)


# --- one real request is one call ------------------------------------------------------------


def test_llamaindex_a_model_span_that_makes_no_request_is_no_call() -> None:
    events = mapped(shapes.llamaindex_function_agent())
    calls = only(events, ModelCalled)
    assert len(calls) == 2  # was 4: _prepare_chat_with_tools counted as a request
    assert [(c.input_tokens, c.output_tokens) for c in calls] == [(40, 12), (60, 5)]
    assert all(isinstance(c.request, list) for c in calls)  # the request's messages


def test_llamaindex_steps_are_where_the_activity_is() -> None:
    events = mapped(shapes.llamaindex_function_agent())
    (started,) = only(events, RunStarted)
    assert started.planned_steps == [
        "FunctionAgent.run_agent_step",
        "FunctionAgent.call_tool",
        "FunctionAgent.run_agent_step",
    ]  # was 9: init_run, setup_agent, parse_agent_output... hold no call
    assert [s.step_index for s in only(events, StepStarted)] == [0, 1, 2]
    (tool,) = only(events, ToolCalled)
    assert (tool.step_index, tool.args, tool.result) == (1, {"city": "Lisbon"}, "sunny in Lisbon")
    assert only(events, RunCompleted)


@pytest.mark.parametrize("fails", [False, True])
def test_autogen_a_tool_call_seen_by_two_instrumentations_is_one_call(fails: bool) -> None:
    events = mapped(shapes.autogen_run(tool_fails=fails))
    (tool,) = only(events, ToolCalled)  # was 2: OpenInference's span and autogen's own
    city = "Atlantis" if fails else "Lisbon"
    assert tool.args == {"city": city}  # autogen-core's span has none: the richer one's kept
    assert tool.status == ("error" if fails else "ok")  # in error if either span is
    if fails:
        assert (tool.error_type, tool.error) == ("ValueError", f"no such city: {city}")
        assert tool.result == f"Error: no such city: {city}"
    assert len(only(events, StepAttemptFailed)) == (1 if fails else 0)
    assert len(only(events, ModelCalled)) == 2


def test_nested_spans_of_one_request_are_one_call_with_the_tokens_of_either() -> None:
    t = shapes.Trace()
    root = t.span("agent", None, 0, 20, {"openinference.span.kind": "AGENT"})
    outer = t.span(
        "ChatOpenAI",
        root,
        1,
        9,
        {  # a framework's span, no usage reported
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.content": "hi",
        },
    )
    t.span(
        "chat gpt-4o",
        outer,
        2,
        8,
        {  # the client library's span of the same request
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 11,
            "gen_ai.usage.output_tokens": 3,
        },
    )
    t.span(
        "lookup",
        root,
        10,
        12,
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
    )
    (call,) = only(mapped(t.spans), ModelCalled)
    assert (call.model, call.input_tokens, call.output_tokens) == ("gpt-4o", 11, 3)
    assert call.request == [{"message": {"content": "hi"}}]


def test_a_model_span_around_several_requests_is_not_a_call_itself() -> None:
    t = shapes.Trace()
    root = t.span("agent", None, 0, 20, {"gen_ai.operation.name": "invoke_agent"})
    router = t.span(
        "router",
        root,
        1,
        19,
        {"openinference.span.kind": "LLM", "llm.input_messages.0.message.content": "hi"},
    )
    for start, fails in ((2, True), (10, False)):
        t.span(
            "chat m",
            router,
            start,
            start + 5,
            {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 5},
            exception=("RateLimitError", "slow down") if fails else None,
        )
    calls = only(mapped(t.spans), ModelCalled)
    assert [c.error for c in calls] == ["slow down", None]  # the two real requests, no third


def test_a_tool_that_runs_another_tool_keeps_both_calls() -> None:
    t = shapes.Trace()
    root = t.span("agent", None, 0, 20, {"gen_ai.operation.name": "invoke_agent"})
    outer = t.span(
        "plan_trip",
        root,
        1,
        19,
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "plan_trip"},
    )
    t.span(
        "lookup",
        outer,
        2,
        5,
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
    )
    t.span("chat", root, 20, 21, {"gen_ai.operation.name": "chat"})
    assert [c.tool for c in only(mapped(t.spans), ToolCalled)] == ["plan_trip", "lookup"]


# --- phantom traces ----------------------------------------------------------------------------


def test_autogen_create_agent_trace_is_archived_not_a_run(store: EventStore) -> None:
    spans = shapes.autogen_create_agent()
    assert map_trace(spans).phantom and not map_trace(spans).events
    report = send(store, spans)
    assert report.runs == 0 and report.appended == 0
    run_id = run_id_for(spans[0].trace_id)
    assert store.version(run_id) == 0  # no phantom completed 0-step run of version "unknown"
    assert spans[0].trace_id in archive.load(store, [spans[0].trace_id])  # kept all the same


def test_a_phantom_trace_becomes_a_run_when_activity_arrives_late(store: EventStore) -> None:
    t = shapes.Trace()
    root = t.span("create_agent a", None, 0, 30, {"gen_ai.operation.name": "create_agent"})
    send(store, [root])
    late = t.span("chat m", root, 5, 9, {"gen_ai.operation.name": "chat"})
    report = send(store, [late])
    run_id = run_id_for(t.trace_id)
    assert report.run_ids == {run_id}
    types = [e.type for e in store.read_run(run_id)]
    assert types[0] == "RunStarted" and "RunRevised" not in types and "ModelCalled" in types


def test_a_trace_of_plain_spans_is_still_a_run() -> None:
    t = shapes.Trace()
    root = t.span("my task", None, 0, 10)
    t.span("fetch", root, 1, 5)
    t.span("parse", root, 6, 9)
    run = map_trace(t.spans)
    assert not run.phantom
    assert only([e.event for e in run.events], RunStarted)[0].planned_steps == ["fetch", "parse"]


# --- content from events ---------------------------------------------------------------------


@pytest.mark.parametrize("latest", [False, True], ids=["semconv-1.36", "latest-experimental"])
def test_strands_content_comes_from_span_events(latest: bool) -> None:
    events = mapped(shapes.strands_run(latest=latest))
    (tool,) = only(events, ToolCalled)
    assert tool.args == {"city": "Lisbon"}  # was None: Strands puts it in events only
    assert tool.result == [{"text": "sunny in Lisbon"}]
    (model,) = only(events, ModelCalled)
    assert model.request is not None and model.response is not None
    assert "weather in Lisbon?" in json.dumps(model.request)
    assert "lookup" in json.dumps(model.response)
    assert (model.input_tokens, model.output_tokens) == (50, 9)


# --- tool arguments, steps and signatures ----------------------------------------------------


def test_smolagents_tool_arguments_come_out_of_the_call_envelope() -> None:
    tools = only(mapped(shapes.smolagents_run()), ToolCalled)
    assert [t.args for t in tools] == [{"city": "Paris"}, {"city": "Paris"}]


def test_smolagents_one_failure_at_two_positions_has_one_signature() -> None:
    signatures = set()
    for position in (3, 7):
        (failed,) = only(mapped(shapes.smolagents_run(fail_at=position)), RunFailed)
        assert failed.step == f"Step {position}"
        signatures.add(signature_of("weather", failed.step, failed.error_type, failed.message).id)
    assert len(signatures) == 1


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(
    kwargs=st.dictionaries(st.text(min_size=1, max_size=8), _json, min_size=1, max_size=4),
    flags=st.dictionaries(
        st.sampled_from(["sanitize_inputs_outputs", "verbose"]), st.booleans() | st.none()
    ),
)
def test_keyword_arguments_are_unwrapped_from_any_envelope(
    kwargs: dict[str, Any], flags: dict[str, Any]
) -> None:
    assert attributes.unwrap_call({"args": [], **flags, "kwargs": kwargs}) == kwargs
    assert attributes.unwrap_call({"kwargs": kwargs}) == kwargs
    assert attributes.unwrap_call({"args": [kwargs]}) == kwargs


@given(st.dictionaries(st.text(max_size=8), _json, max_size=4))
def test_arguments_without_an_envelope_are_left_alone(value: dict[str, Any]) -> None:
    if not ({"args", "kwargs"} & set(value)):
        assert attributes.unwrap_call(value) == value
    assert attributes.unwrap_call({**value, "args": ["x"], "kwargs": {}, "path": "/tmp"}) == {
        **value,
        "args": ["x"],
        "kwargs": {},
        "path": "/tmp",
    }  # a real argument beside them: not an envelope


# --- the OpenAI Agents SDK: a wrapper's error is not another attempt -------------------------


def test_openai_agents_a_provider_error_is_one_attempt_with_a_readable_cause(
    store: EventStore,
) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from helpers.fake_llm import fake_llm
    from helpers.frameworks import Capture, instrument_openai_agents
    from openai import AsyncOpenAI

    capture = Capture()
    instrumentor = instrument_openai_agents(capture)
    message = "This model's maximum context length is 8192 tokens. However, you asked for 9000."
    try:
        with fake_llm() as llm:
            llm.failure = (
                400,
                {
                    "error": {
                        "message": message,
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": "context_length_exceeded",
                    }
                },
            )

            @function_tool
            def lookup(query: str) -> str:
                """Look the weather up."""
                llm.fail_next = 1  # the next request (the second turn's) is refused
                return "sunny"

            client = AsyncOpenAI(api_key="x", base_url=llm.openai_url, max_retries=0)
            model = OpenAIChatCompletionsModel(model="gpt-x", openai_client=client)
            with pytest.raises(Exception, match="maximum context length"):
                Runner.run_sync(Agent(name="weather", model=model, tools=[lookup]), "weather?")
        (run_id,) = capture.ingest(store)
    finally:
        instrumentor.uninstrument()
    events = [e.to_event() for e in store.read_run(run_id)]
    (step_failed,) = only(events, StepFailed)
    assert step_failed.attempts == 1  # was 2: the agent span's error counted again
    assert not only(events, StepAttemptFailed)
    (failed,) = only(events, RunFailed)
    assert failed.message == f"400: {message}"  # was "Error code: 400 - ..."
    signature = signature_of("weather", failed.step, failed.error_type, failed.message)
    assert signature.message.startswith("400: This model's maximum context length is <n> tokens")
