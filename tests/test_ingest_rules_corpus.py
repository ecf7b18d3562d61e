"""The mapping rules the conformance corpus (``tests/corpus``) asked for, each as the family it
covers: a tool span beside its own transport span is one call (the Claude Agent SDK's MCP
``tools/call``), a tool named after a Python call method is named by the tool (DSPy), a run
whose root never arrived is failed until a model answer proves otherwise, a Stainless SDK's
error text names its class (the OpenAI Agents SDK's ``Error getting response``), and a
framework with a vocabulary of its own is read through its dialect (Haystack)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from helpers.shapes import OK, Trace
from hypothesis import given, settings
from hypothesis import strategies as st

from steplog.events import ModelCalled, RunCompleted, RunFailed, ToolCalled
from steplog.ingest.otlp.genai import map_trace
from steplog.ingest.otlp.span_errors import error_of
from steplog.ingest.otlp.span_model import STATUS_ERROR, Span
from steplog.ingest.provider_errors import readable_error


def mapped(spans: list[Span]) -> list[Any]:
    return [e.event for e in map_trace(spans).events]


def only(events: list[Any], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def _chat(trace: Trace, parent: Span, start: int) -> Span:
    return trace.span(
        "chat gpt-4o-mini",
        parent,
        start,
        start + 5,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.output_tokens": 2,
        },
    )


# --- a tool call and its transport span are one call -----------------------------------------

MARKS = st.sampled_from(["__", ".", "/", ":"])


@settings(max_examples=60, deadline=None)
@given(
    calls=st.lists(
        st.tuples(
            st.sampled_from(["lookup", "search", "read_file"]),
            st.booleans(),  # failed
            MARKS,
            st.text("abcxyz", min_size=1, max_size=6),  # the namespace
            st.booleans(),  # the transport span carries the bare name (else the full one)
        ),
        min_size=1,
        max_size=6,
    ),
    reverse=st.booleans(),
)
def test_a_tool_span_beside_its_transport_span_is_one_call(
    calls: list[tuple[str, bool, str, str, bool]], reverse: bool
) -> None:
    """Whatever the tools, namespaces and outcomes, and in whichever order the spans arrive, a
    tool span with a tool span of the same tool inside it in time, under the same parent (the
    context lost on the way), maps to one call per real call, named by the outer span."""
    trace = Trace()
    root = trace.span(
        "invoke_agent weather", None, 0, 1000, {"gen_ai.operation.name": "invoke_agent"}
    )
    expected = []
    for n, (tool, failed, mark, space, bare) in enumerate(calls):
        start = 10 + n * 100
        full = f"mcp{mark}{space}{mark}{tool}"
        status = STATUS_ERROR if failed else OK
        _chat(trace, root, start)
        trace.span(
            full,
            root,
            start + 10,
            start + 60,
            {
                "openinference.span.kind": "TOOL",
                "tool.name": full,
                "input.value": json.dumps({"n": n}),
            },
            status=status,
        )
        trace.span(
            f"tools/call {tool}",
            root,
            start + 20,
            start + 40,
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool if bare else full},
            status=status,
        )
        expected.append((full, {"n": n}, "error" if failed else "ok"))
    _chat(trace, root, 10 + len(calls) * 100)
    spans = list(reversed(trace.spans)) if reverse else trace.spans
    tools = only(mapped(spans), ToolCalled)
    assert [(t.tool, t.args, t.status) for t in tools] == expected


def test_two_different_tools_overlapping_in_time_stay_two_calls() -> None:
    trace = Trace()
    root = trace.span("invoke_agent", None, 0, 500, {"gen_ai.operation.name": "invoke_agent"})
    _chat(trace, root, 0)
    trace.span(
        "lookup",
        root,
        10,
        100,
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
    )
    trace.span(
        "search",
        root,
        20,
        50,
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"},
    )
    _chat(trace, root, 200)
    assert [t.tool for t in only(mapped(trace.spans), ToolCalled)] == ["lookup", "search"]


# --- a tool named after a Python call method --------------------------------------------------


def test_a_tool_span_named_after_its_call_method_is_named_by_the_tool() -> None:
    trace = Trace()
    root = trace.span("ReAct.forward", None, 0, 500, {"openinference.span.kind": "CHAIN"})
    _chat(trace, root, 0)
    for n, name in enumerate(["lookup.__call__", "finish.acall", "db.query.__acall__"]):
        trace.span(name, root, 100 + n * 50, 120 + n * 50, {"openinference.span.kind": "TOOL"})
    _chat(trace, root, 300)
    tools = only(mapped(trace.spans), ToolCalled)
    assert [t.tool for t in tools] == ["lookup", "finish", "db.query"]


# --- a run whose root never arrived ------------------------------------------------------------


def _rootless(last: str) -> list[Span]:
    trace = Trace()
    root = trace.span("invoke_agent", None, 0, 500, {"gen_ai.operation.name": "invoke_agent"})
    _chat(trace, root, 0)
    trace.span(
        "lookup",
        root,
        10,
        20,
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
    )
    if last == "model":
        _chat(trace, root, 100)
    return [s for s in trace.spans if s is not root]


def test_a_rootless_run_ending_in_a_model_answer_completed() -> None:
    events = mapped(_rootless("model"))
    assert only(events, RunCompleted) and not only(events, RunFailed)


def test_a_rootless_run_with_no_answer_at_its_end_is_failed_until_proven() -> None:
    events = mapped(_rootless("tool"))
    (failed,) = only(events, RunFailed)
    assert failed.error_type == "RootMissing" and "never arrived" in failed.message


def test_a_trace_with_several_roots_is_not_a_missing_root() -> None:
    """Two top-level spans that both arrived (a framework that starts two): the trace goes
    under a synthetic root, but nothing is missing, so nothing needs proving."""
    trace = Trace()
    agent = trace.span("invoke_agent", None, 0, 50, {"gen_ai.operation.name": "invoke_agent"})
    _chat(trace, agent, 0)
    tools = trace.span("tool runner", None, 60, 100)
    trace.span(
        "lookup",
        tools,
        60,
        70,
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
    )
    events = mapped(trace.spans)
    assert only(events, RunCompleted) and not only(events, RunFailed)


def test_a_rootless_trace_of_plain_spans_is_judged_by_its_steps() -> None:
    trace = Trace()
    root = trace.span("my agent", None, 0, 100)
    trace.span("plan", root, 0, 10)
    trace.span("act", root, 10, 20)
    events = mapped([s for s in trace.spans if s is not root])
    assert only(events, RunCompleted)


# --- Stainless SDKs' error text names the class -----------------------------------------------


def test_an_agents_sdk_summary_wrapping_a_400_reads_as_bad_request() -> None:
    trace = Trace()
    span = trace.span(
        "generation",
        None,
        0,
        1,
        {"openinference.span.kind": "LLM"},
        status=STATUS_ERROR,
        message="Error getting response: {'error': \"Error code: 400 - This model's maximum "
        'context length is 128 tokens."}',
    )
    error = error_of(span)
    assert error.error_type == "BadRequestError"
    assert error.message == "400: This model's maximum context length is 128 tokens."


def test_each_status_of_a_stainless_sdk_names_the_class_it_raises() -> None:
    # openai 1.x / anthropic: _exceptions.py, one class per status (published in their READMEs)
    for status, name in [
        (400, "BadRequestError"),
        (401, "AuthenticationError"),
        (403, "PermissionDeniedError"),
        (404, "NotFoundError"),
        (409, "ConflictError"),
        (422, "UnprocessableEntityError"),
        (429, "RateLimitError"),
        (500, "InternalServerError"),
        (503, "InternalServerError"),
    ]:
        body = json.dumps({"error": {"message": "m", "code": "c"}})
        assert readable_error(None, f"Error code: {status} - {body}") == (name, f"{status} c: m")
    # a class the span named is kept
    assert readable_error("openai.RateLimitError", "Error code: 429 - slow down")[0] == (
        "openai.RateLimitError"
    )


# --- Haystack's dialect ------------------------------------------------------------------------


def test_haystack_spans_map_through_their_dialect() -> None:
    trace = Trace()
    trace.resource = {"service.name": "haystack"}
    root = trace.span("haystack.pipeline.run", None, 0, 900)
    agent = trace.span("haystack.agent.run", root, 0, 900)

    def llm(parent: Span, start: int, tokens: tuple[int, int]) -> None:
        reply = {"replies": [{"meta": {"model": "gpt-4o-mini", "usage": {
            "prompt_tokens": tokens[0], "completion_tokens": tokens[1]}}}]}  # fmt: skip
        trace.span("haystack.agent.step.llm", parent, start, start + 10,
                   {"haystack.agent.step.llm.output": json.dumps(reply)})  # fmt: skip

    step = trace.span("haystack.agent.step", agent, 0, 400)
    llm(step, 0, (101, 11))
    trace.span(
        "haystack.agent.step.tool",
        step,
        20,
        30,
        {
            "haystack.tool.name": "lookup",
            "haystack.agent.step.tool.input": '{"city": "Atlantis"}',
            "haystack.agent.step.tool.output": '{"error": "no such city"}',
            "haystack.tool.error": True,
        },
    )
    last = trace.span("haystack.agent.step", agent, 500, 900)
    llm(last, 500, (102, 12))
    spans = [replace(s, scope="haystack") for s in trace.spans]
    events = mapped(spans)
    calls = only(events, ModelCalled)
    assert [(c.model, c.input_tokens, c.output_tokens) for c in calls] == [
        ("gpt-4o-mini", 101, 11),
        ("gpt-4o-mini", 102, 12),
    ]
    (tool,) = only(events, ToolCalled)
    assert (tool.tool, tool.args, tool.status) == ("lookup", {"city": "Atlantis"}, "error")
    assert only(events, RunCompleted)
