"""Span shapes real instrumentations emit, written from their source (the version is named on
each): what :mod:`steplog.ingest.otlp` must map by convention.

Each builder returns the spans of one trace as the OTLP decoder gives them. Only the attributes
and events the instrumentation sets are written; values are what its code would put there for
the run described (the weather agent of ``helpers.frameworks``: ``lookup("Atlantis")`` fails,
``lookup("Lisbon")`` works).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from steplog.ingest.otlp.span_model import STATUS_ERROR, Span, SpanEvent

T0 = 1_764_460_800_000_000_000
OK = 1


class Trace:
    """Spans of one trace, built parent first; times in milliseconds after ``T0``."""

    _traces = itertools.count(1)

    def __init__(self, service: str = "weather-service") -> None:
        self.trace_id = f"{next(self._traces):032x}"
        self.resource = {"service.name": service}
        self.spans: list[Span] = []
        self._ids = itertools.count(1)

    def span(
        self,
        name: str,
        parent: Span | None,
        start: int,
        end: int,
        attributes: dict[str, Any] | None = None,
        *,
        events: list[tuple[str, dict[str, Any]]] = (),  # type: ignore[assignment]
        status: int = OK,
        message: str = "",
        exception: tuple[str, str] | None = None,
    ) -> Span:
        found = list(events)
        if exception is not None:
            found.append(
                ("exception", {"exception.type": exception[0], "exception.message": exception[1]})
            )
            status = STATUS_ERROR
        span = Span(
            trace_id=self.trace_id,
            span_id=f"{next(self._ids):016x}",
            parent_span_id=parent.span_id if parent else None,
            name=name,
            kind=1,
            start_ns=T0 + start * 1_000_000,
            end_ns=T0 + end * 1_000_000,
            attributes=dict(attributes or {}),
            status_code=status,
            status_message=message,
            events=tuple(SpanEvent(n, T0 + start * 1_000_000, a) for n, a in found),
            resource=self.resource,
            scope="tests",
        )
        self.spans.append(span)
        return span


# --- LlamaIndex 0.14 FunctionAgent + openinference-instrumentation-llama-index 4.6 -----------
# _handler.py: every dispatcher span is named ``Class.method``; a method of an LLM object is
# LLM-kind (``_init_span_kind(BaseLLM)``) with ``input.value`` = the bound arguments and
# ``llm.model_name`` from its metadata; only chat/completion events add ``llm.input_messages``,
# ``llm.output_messages`` and token counts; a tool's ``acall(*args, **kwargs)`` input is
# ``{"kwargs": {...}}``; workflow steps are CHAIN spans.


def llamaindex_function_agent() -> list[Span]:
    """Two model requests and one tool call, in nine workflow steps."""
    t = Trace()
    root = t.span("FunctionAgent.run", None, 0, 100, _chain({"user_msg": "weather in Lisbon?"}))
    clock = itertools.count(1, 10)

    def step(name: str) -> Span:
        start = next(clock)
        return t.span(f"FunctionAgent.{name}", root, start, start + 9, _chain({"ev": name}))

    def request(parent: Span, answer: dict[str, Any], tokens: tuple[int, int]) -> None:
        base = parent.start_ns // 1_000_000 - T0 // 1_000_000
        prepare = {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "llm.tools.0.tool.json_schema": json.dumps({"name": "lookup"}),
            "input.value": json.dumps({"tools": ["lookup"], "user_msg": "weather in Lisbon?"}),
            "output.value": json.dumps({"messages": [{"role": "user"}], "tools": [{}]}),
        }
        t.span("OpenAI._prepare_chat_with_tools", parent, base + 1, base + 2, prepare)
        chat = {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "input.value": json.dumps({"messages": ["..."]}),
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "weather in Lisbon?",
            "llm.output_messages.0.message.role": "assistant",
            **answer,
            "llm.token_count.prompt": tokens[0],
            "llm.token_count.completion": tokens[1],
        }
        t.span("OpenAI.astream_chat", parent, base + 3, base + 8, chat)

    step("init_run")
    step("setup_agent")
    request(
        step("run_agent_step"),
        {
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": (
                '{"city": "Lisbon"}'
            ),
        },
        (40, 12),
    )
    step("parse_agent_output")
    call = step("call_tool")
    base = call.start_ns // 1_000_000 - T0 // 1_000_000
    t.span(
        "FunctionTool.acall",
        call,
        base + 1,
        base + 5,
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "lookup",
            "tool.description": "Look up the weather in a city.",
            "tool.parameters": json.dumps({"properties": {"city": {"type": "string"}}}),
            "input.value": json.dumps({"kwargs": {"city": "Lisbon"}}),
            "output.value": "sunny in Lisbon",
        },
    )
    step("aggregate_tool_results")
    step("setup_agent")
    request(
        step("run_agent_step"), {"llm.output_messages.0.message.content": "It is sunny."}, (60, 5)
    )
    step("parse_agent_output")
    return t.spans


def _chain(value: Any) -> dict[str, Any]:
    return {"openinference.span.kind": "CHAIN", "input.value": json.dumps(value)}


# --- smolagents 1.26 + openinference-instrumentation-smolagents 0.1.43 -----------------------
# _wrappers.py: ``{Agent}.run`` AGENT; ``Step {agent.step_number}`` CHAIN; ``{Model}.generate``
# LLM with llm.input_messages/llm.output_messages and token counts; a tool span is named after
# its class, TOOL kind, ``input.value`` = the bound arguments of ``Tool.__call__(self, *args,
# sanitize_inputs_outputs=False, **kwargs)``; an unexpected step error is recorded as an
# exception event and ERROR status.


def smolagents_run(fail_at: int | None = None, steps: int = 2) -> list[Span]:
    """A ToolCallingAgent run of ``steps`` steps, each one model call and one tool call; with
    ``fail_at``, that step's tool raises and the run ends there."""
    t = Trace()
    last = fail_at or steps
    root = t.span(
        "ToolCallingAgent.run",
        None,
        0,
        20 * last + 10,
        {
            "openinference.span.kind": "AGENT",
            "input.value": json.dumps({"task": "weather?"}),
        },
        status=STATUS_ERROR if fail_at else OK,
    )
    for number in range(1, last + 1):
        start = 20 * number
        failing = number == fail_at
        step = t.span(
            f"Step {number}",
            root,
            start,
            start + 15,
            {"openinference.span.kind": "CHAIN", "input.value": json.dumps({"memory_step": "..."})},
            exception=(
                "AgentExecutionError",
                f"Error executing tool 'lookup' at step {number}: no such city",
            )
            if failing
            else None,
        )
        t.span(
            "OpenAIServerModel.generate",
            step,
            start + 1,
            start + 5,
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "weather?",
                "llm.output_messages.0.message.role": "assistant",
                "llm.token_count.prompt": 30,
                "llm.token_count.completion": 8,
            },
        )
        city = "Atlantis" if failing else "Paris"
        t.span(
            "LookupTool",
            step,
            start + 6,
            start + 9,
            {
                "openinference.span.kind": "TOOL",
                "tool.name": "lookup",
                "tool.parameters": json.dumps({"city": {"type": "string"}}),
                "input.value": json.dumps(
                    {"args": [], "sanitize_inputs_outputs": True, "kwargs": {"city": city}}
                ),
                **({} if failing else {"output.value": f"sunny in {city}"}),
            },
            exception=("ValueError", f"no such city: {city}") if failing else None,
        )
    return t.spans


# --- Strands Agents 1.x native GenAI spans (strands/telemetry/tracer.py) ---------------------
# ``invoke_agent`` > ``execute_event_loop_cycle`` > ``chat`` / ``execute_tool NAME``. Content is
# in span events only: by default (semconv v1.36) ``gen_ai.{role}.message`` {content} and
# ``gen_ai.choice`` {finish_reason, message} on the chat span, ``gen_ai.tool.message``
# {role, content, id} (the input) and ``gen_ai.choice`` {message, id} (the result) on the tool
# span; with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental one
# ``gen_ai.client.inference.operation.details`` event per side instead.


def strands_run(*, latest: bool) -> list[Span]:
    t = Trace()
    common = {"gen_ai.system": "strands-agents", "gen_ai.provider.name": "strands-agents"}
    root = t.span(
        "invoke_agent Strands Agents",
        None,
        0,
        50,
        {
            **common,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "Strands Agents",
            "gen_ai.request.model": "us.amazon.nova-pro-v1:0",
        },
    )
    cycle = t.span(
        "execute_event_loop_cycle",
        root,
        1,
        30,
        {**common, "gen_ai.operation.name": "execute_event_loop_cycle"},
    )
    user = [{"role": "user", "content": [{"text": "weather in Lisbon?"}]}]
    call = {"toolUse": {"toolUseId": "t1", "name": "lookup", "input": {"city": "Lisbon"}}}
    if latest:
        chat_events = [
            (
                OPERATION_DETAILS,
                {
                    "gen_ai.input.messages": json.dumps(
                        [
                            {
                                "role": "user",
                                "parts": [{"type": "text", "content": "weather in Lisbon?"}],
                            }
                        ]
                    )
                },
            ),
            (
                OPERATION_DETAILS,
                {
                    "gen_ai.output.messages": json.dumps(
                        [
                            {
                                "role": "assistant",
                                "finish_reason": "tool_use",
                                "parts": [
                                    {
                                        "type": "tool_call",
                                        "id": "t1",
                                        "name": "lookup",
                                        "arguments": {"city": "Lisbon"},
                                    }
                                ],
                            }
                        ]
                    )
                },
            ),
        ]
        tool_events = [
            (
                OPERATION_DETAILS,
                {
                    "gen_ai.input.messages": json.dumps(
                        [
                            {
                                "role": "tool",
                                "parts": [
                                    {
                                        "type": "tool_call",
                                        "name": "lookup",
                                        "id": "t1",
                                        "arguments": {"city": "Lisbon"},
                                    }
                                ],
                            }
                        ]
                    )
                },
            ),
            (
                OPERATION_DETAILS,
                {
                    "gen_ai.output.messages": json.dumps(
                        [
                            {
                                "role": "tool",
                                "parts": [
                                    {
                                        "type": "tool_call_response",
                                        "id": "t1",
                                        "response": [{"text": "sunny in Lisbon"}],
                                    }
                                ],
                            }
                        ]
                    )
                },
            ),
        ]
    else:
        chat_events = [
            ("gen_ai.user.message", {"content": json.dumps(user[0]["content"])}),
            ("gen_ai.choice", {"finish_reason": "tool_use", "message": json.dumps([call])}),
        ]
        tool_events = [
            (
                "gen_ai.tool.message",
                {"role": "tool", "content": json.dumps({"city": "Lisbon"}), "id": "t1"},
            ),
            ("gen_ai.choice", {"message": json.dumps([{"text": "sunny in Lisbon"}]), "id": "t1"}),
        ]
    t.span(
        "chat",
        cycle,
        2,
        10,
        {
            **common,
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "us.amazon.nova-pro-v1:0",
            "gen_ai.usage.input_tokens": 50,
            "gen_ai.usage.output_tokens": 9,
        },
        events=chat_events,
    )
    t.span(
        "execute_tool lookup",
        cycle,
        11,
        20,
        {
            **common,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup",
            "gen_ai.tool.call.id": "t1",
            "gen_ai.tool.status": "success",
        },
        events=tool_events,
    )
    return t.spans


OPERATION_DETAILS = "gen_ai.client.inference.operation.details"


# --- AutoGen AgentChat 0.7 + openinference-instrumentation-autogen-agentchat 0.1.22 ----------
# autogen-core's own spans (autogen_core/_telemetry/_genai.py): ``create_agent NAME`` (its own
# trace, when the agent is built) and ``execute_tool NAME`` (gen_ai.tool.name, tool.call.id, no
# arguments by any GenAI name) inside OpenInference's TOOL span ``AGENT.TOOL`` (input.value =
# the call's arguments, output.value = the result, status OK whatever the result said).


def autogen_create_agent() -> list[Span]:
    t = Trace()
    t.span(
        "create_agent assistant",
        None,
        0,
        1,
        {
            "gen_ai.operation.name": "create_agent",
            "gen_ai.system": "autogen",
            "gen_ai.agent.name": "assistant",
            "gen_ai.agent.id": "assistant/default",
        },
    )
    return t.spans


def autogen_run(*, tool_fails: bool) -> list[Span]:
    """One agent run: a model call, the tool call (failing: ``lookup`` raised; AgentChat hands
    the error back to the model), a second model call."""
    t = Trace()
    root = t.span(
        "assistant.on_messages_stream",
        None,
        0,
        40,
        {"openinference.span.kind": "AGENT", "input.value": "weather in Lisbon?"},
    )
    llm = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "weather in Lisbon?",
        "llm.token_count.prompt": 20,
        "llm.token_count.completion": 6,
    }
    t.span("OpenAIChatCompletionClient.create", root, 1, 5, llm)
    city = "Atlantis" if tool_fails else "Lisbon"
    result = f"Error: no such city: {city}" if tool_fails else f"sunny in {city}"
    outer = t.span(
        "assistant.lookup",
        root,
        6,
        12,
        {
            "openinference.span.kind": "TOOL",
            "tool.name": "lookup",
            "tool.parameters": json.dumps({"city": city}),
            "input.value": json.dumps({"city": city}),
            "output.value": result,
        },
    )
    t.span(
        "execute_tool lookup",
        outer,
        7,
        11,
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.system": "autogen",
            "gen_ai.tool.name": "lookup",
            "gen_ai.tool.call.id": "call_1",
        },
        exception=("ValueError", f"no such city: {city}") if tool_fails else None,
    )
    t.span("OpenAIChatCompletionClient.create", root, 13, 18, llm)
    return t.spans
