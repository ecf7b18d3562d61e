"""Reading what a span means from its attributes and events: the OpenTelemetry GenAI semantic
conventions (current, latest-experimental and deprecated), OpenInference's flattened attributes,
and the few names frameworks add of their own (each such rule names the framework and version).
The rule set, with examples, is in ``core/guide/mapping.md``.

Every function here is pure and total: a missing or odd attribute gives ``None``/``0``, never an
exception.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from itertools import repeat
from typing import Any, NamedTuple

from .span_model import Span, SpanEvent
from .values import (
    as_dict,
    first,
    first_float,
    first_int,
    first_text,
    json_or_text,
    unflatten,
)

MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
TOOL_OPERATIONS = frozenset({"execute_tool"})
AGENT_OPERATIONS = frozenset({"invoke_agent"})
OPERATION_DETAILS = "gen_ai.client.inference.operation.details"
"""The latest-experimental GenAI event carrying a call's ``gen_ai.input.messages`` and
``gen_ai.output.messages`` (structured) when they are not span attributes."""

_CALL_METHOD = re.compile(r"\.(?:__a?call__|acall)\Z")
_OPENINFERENCE_OPERATIONS = {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent"}
_REQUEST_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.completion_tokens",
    "gen_ai.response.id",
    "gen_ai.response.finish_reasons",
    "llm.token_count.prompt",
    "llm.token_count.completion",
    "llm.token_count.total",
)
"""Attributes only a request to a model (or its response) has."""
_REQUEST_PREFIXES = (
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.prompts",
    "llm.choices",
    "gen_ai.prompt.",
    "gen_ai.completion.",
)
"""Flattened forms of the same (OpenInference; OpenLLMetry's ``gen_ai.prompt.0.content``)."""
_FLAGS = (bool, type(None))
_MARKERS: dict[tuple[str, ...], tuple[str, ...]] = {}


def operation(span: Span) -> str:
    """The GenAI operation (``chat``, ``execute_tool``, ``invoke_agent``...) of ``span``; an
    OpenInference kind stands for one (``LLM`` -> ``chat``, ``TOOL`` -> ``execute_tool``,
    ``AGENT`` -> ``invoke_agent``, any other kind -> its name in lower case)."""
    op = span.attributes.get("gen_ai.operation.name")
    if isinstance(op, str) and op:
        return op
    kind = span.attributes.get("openinference.span.kind")
    if isinstance(kind, str) and kind:
        upper = kind.upper()
        return _OPENINFERENCE_OPERATIONS.get(upper) or kind.lower()
    return ""


def call_kind(span: Span) -> str | None:
    """``model``, ``tool``, or ``None`` for a span that is neither call.

    A tool span is a call. A model span is a call when it made a request (see
    :func:`makes_request`): OpenInference marks every method of a model object ``LLM``, also
    the ones that only prepare one."""
    op = operation(span)
    if op in TOOL_OPERATIONS:
        return "tool"
    if op in MODEL_OPERATIONS and (
        "gen_ai.operation.name" in span.attributes or makes_request(span)
    ):
        return "model"  # (a GenAI client span is one request: no need to look further)
    return None


def is_activity(span: Span) -> bool:
    """Whether ``span`` is agent, model or tool activity (what makes a trace a run)."""
    return call_kind(span) is not None or operation(span) in AGENT_OPERATIONS


def makes_request(span: Span) -> bool:
    """Whether a model-kind span shows a request: a GenAI client span (``gen_ai.operation.name``
    ``chat``...: one span per request, by that convention), a span in error, or one carrying a
    request's or response's messages, token counts or response id, as attributes or events.
    (LlamaIndex 0.14's ``_prepare_chat_with_tools`` is ``LLM``-kind with none of them.)"""
    attrs = span.attributes
    if attrs.get("gen_ai.operation.name") in MODEL_OPERATIONS or span.failed:
        return True
    if any(key in attrs for key in _REQUEST_KEYS):
        return True
    if any(key.startswith(_REQUEST_PREFIXES) for key in attrs):
        return True
    return any(_is_content_event(event.name) for event in span.events)


def _is_content_event(name: str) -> bool:
    return name.startswith("gen_ai.") and (
        name == OPERATION_DETAILS
        or name.endswith(".message")
        or name == "gen_ai.choice"
        or name.startswith("gen_ai.content.")
    )


def model_of(span: Span) -> str | None:
    return first_text(
        span.attributes, "gen_ai.response.model", "gen_ai.request.model", "llm.model_name"
    )


def tool_name_of(span: Span) -> str:
    """The tool's name: the conventions' attributes, else the span's name without the Python
    call method an instrumentor names its span after (DSPy 3.4 with OpenInference 0.1.48:
    ``lookup.__call__``, ``lookup.acall``)."""
    named = first_text(span.attributes, "gen_ai.tool.name", "tool.name", "tool_call.function.name")
    if named:
        return named
    return _CALL_METHOD.sub("", span.name) or span.name or "tool"


def tool_args_of(span: Span) -> Any:
    """The arguments the tool was called with (never OpenInference's ``tool.parameters``, which
    is the tool's JSON schema, not the call): ``gen_ai.tool.call.arguments``; else the
    function's input ``input.value``, taken out of a Python ``args``/``kwargs`` envelope (see
    :func:`unwrap_call`); else the call's part in the span's events."""
    attrs = span.attributes
    value = attrs.get("gen_ai.tool.call.arguments")
    if value not in (None, ""):
        return json_or_text(value)
    value = attrs.get("input.value")
    if value not in (None, ""):
        return unwrap_call(json_or_text(value))
    value = first(
        attrs,
        "tool_arguments",
        "tool_call.function.arguments",
        # autogen-core 0.7's own execute_tool span names its arguments so
        "autogen.tool.arguments",
    )
    if value is not None:
        return json_or_text(value)
    return _tool_part(
        span, "gen_ai.input.messages", "tool_call", "arguments", "gen_ai.tool.message"
    )


def tool_result_of(span: Span) -> Any:
    """What the tool returned: ``gen_ai.tool.call.result``, ``output.value``, or the response
    part in the span's events."""
    value = first(span.attributes, "gen_ai.tool.call.result", "output.value", "tool_response")
    if value is not None:
        return json_or_text(value)
    return _tool_part(
        span, "gen_ai.output.messages", "tool_call_response", "response", "gen_ai.choice"
    )


def _tool_part(span: Span, messages_key: str, part_type: str, field: str, legacy: str) -> Any:
    """A tool call's arguments or response carried in its span's events: the
    latest-experimental ``gen_ai.client.inference.operation.details`` event's messages (the
    ``tool_call`` / ``tool_call_response`` part), else -- Strands 1.x in its default (v1.36)
    mode -- a ``gen_ai.tool.message`` event's ``content`` (the input) and a ``gen_ai.choice``
    event's ``message`` (the result), which by the convention are a model's history and
    choice, not a tool's."""
    if not span.events:
        return None
    for event in span.events:
        if event.name == OPERATION_DETAILS and messages_key in event.attributes:
            for part in _parts(json_or_text(event.attributes[messages_key])):
                if part.get("type") == part_type and field in part:
                    return json_or_text(part[field])
    for event in span.events:
        if event.name == legacy:
            value = first(event.attributes, "content", "message")
            if value is not None:
                return json_or_text(value)
    return None


def _parts(messages: Any) -> Iterable[dict[str, Any]]:
    if not isinstance(messages, list):
        return
    for message in messages:
        parts = message.get("parts") if isinstance(message, dict) else None
        if isinstance(parts, list):
            yield from (part for part in parts if isinstance(part, dict))


def unwrap_call(value: Any) -> Any:
    """A tool's arguments out of the envelope instrumentors write a Python call's bound
    arguments in: ``{"args": [...], "kwargs": {...}}`` plus framework flags (smolagents 1.26 via
    OpenInference: ``{"args": [], "sanitize_inputs_outputs": true, "kwargs": {"city": ...}}``;
    LlamaIndex 0.14: ``{"kwargs": {...}}``). Keyword arguments are the arguments; positional
    ones are kept as ``args`` (one positional dict alone is the arguments). Anything else is
    returned as it is."""
    if not isinstance(value, dict):
        return value
    args, kwargs = value.get("args"), value.get("kwargs")
    if not isinstance(args, list | type(None)) or not isinstance(kwargs, dict | type(None)):
        return value
    if args is None and kwargs is None:
        return value
    if any(k not in ("args", "kwargs") and not isinstance(v, _FLAGS) for k, v in value.items()):
        return value  # a real argument named args or kwargs
    args, kwargs = args or [], kwargs or {}
    if not args:
        return kwargs
    if not kwargs:
        return args[0] if len(args) == 1 and isinstance(args[0], dict) else {"args": args}
    return {"args": args, **kwargs}


# --- usage -----------------------------------------------------------------------------------


class Usage(NamedTuple):
    """Tokens and cost of a model call (a tuple: built at C speed, once per model call)."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    reasoning_tokens: int
    cost_usd: float


_INPUT_TOKENS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
)
_OUTPUT_TOKENS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
)
_CACHED_TOKENS = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "gen_ai.usage.details.cache_read_tokens",
    "llm.token_count.prompt_details.cache_read",
)
_REASONING_TOKENS = (
    "gen_ai.usage.reasoning.output_tokens",
    "gen_ai.usage.reasoning_tokens",
    "gen_ai.usage.details.reasoning_tokens",
    "llm.token_count.completion_details.reasoning",
)
_COST = ("gen_ai.usage.cost", "llm.cost.total", "operation.cost", "gen_ai.cost")
_USAGE_NAMES = frozenset(
    [*_INPUT_TOKENS, *_OUTPUT_TOKENS, *_CACHED_TOKENS, *_REASONING_TOKENS, *_COST]
)
NO_USAGE = Usage(0, 0, 0, 0, 0.0)


def usage_of(span: Span) -> Usage:
    """Tokens and cost of a model call, under any of the names in use: for each, the first of
    its names that holds a count (a cost), else 0. A span carries few of the names: one set
    intersection finds which, and only those are read."""
    attrs = span.attributes
    present = _USAGE_NAMES.intersection(attrs)
    if not present:
        return NO_USAGE
    disjoint = present.isdisjoint
    return Usage(
        0 if disjoint(_INPUT_TOKENS) else first_int(attrs, *_INPUT_TOKENS),
        0 if disjoint(_OUTPUT_TOKENS) else first_int(attrs, *_OUTPUT_TOKENS),
        0 if disjoint(_CACHED_TOKENS) else first_int(attrs, *_CACHED_TOKENS),
        0 if disjoint(_REASONING_TOKENS) else first_int(attrs, *_REASONING_TOKENS),
        0.0 if disjoint(_COST) else first_float(attrs, *_COST),
    )


# --- messages --------------------------------------------------------------------------------


def model_request(span: Span) -> Any:
    """What was sent to the model, from the first place that has it: ``gen_ai.input.messages``
    (latest) or ``gen_ai.prompt`` (deprecated); the flattened ``llm.input_messages.*``
    (OpenInference) or ``gen_ai.prompt.*`` (OpenLLMetry); the ``operation.details`` event's
    ``gen_ai.input.messages``, a ``gen_ai.content.prompt`` event, or the per-message events
    ``gen_ai.{system,user,assistant,tool}.message`` (v1.36 and before); else ``input.value``."""
    return _messages(
        span,
        ("gen_ai.input.messages", "gen_ai.prompt"),
        ("llm.input_messages", "gen_ai.prompt"),
        "gen_ai.input.messages",
        ("gen_ai.content.prompt", "gen_ai.prompt"),
        _is_message_event,
        "input.value",
    )


def model_response(span: Span) -> Any:
    """What the model answered, read the same way: ``gen_ai.output.messages`` /
    ``gen_ai.completion``, ``llm.output_messages.*`` / ``gen_ai.completion.*``, the
    ``operation.details`` event's ``gen_ai.output.messages``, ``gen_ai.content.completion`` or
    ``gen_ai.choice`` events; else ``output.value``."""
    return _messages(
        span,
        ("gen_ai.output.messages", "gen_ai.completion"),
        ("llm.output_messages", "gen_ai.completion"),
        "gen_ai.output.messages",
        ("gen_ai.content.completion", "gen_ai.completion"),
        _is_choice_event,
        "output.value",
    )


def _messages(
    span: Span,
    keys: tuple[str, ...],
    flattened: tuple[str, ...],
    details_key: str,
    content_event: tuple[str, str],
    is_message_event: Callable[[str], bool],
    fallback: str,
) -> Any:
    """One side of a model call, from the first place that has it (see :func:`model_request`)."""
    attrs = span.attributes
    for key in keys:  # first(attrs, *keys), inline: this runs twice for every model call
        found = attrs.get(key)
        if found not in (None, ""):
            return json_or_text(found)
    markers = _MARKERS.get(flattened) or _MARKERS.setdefault(
        flattened, tuple(f"{prefix}." for prefix in flattened)
    )
    if any(map(str.startswith, attrs, repeat(markers))):  # one C-level pass over the names
        for prefix in flattened:
            flat = unflatten(attrs, prefix)
            if flat is not None:
                return flat
    if span.events:
        found = _from_events(span.events, details_key, content_event, is_message_event)
        if found is not None:
            return found
    found = attrs.get(fallback)
    return None if found is None else json_or_text(found)


def _is_message_event(name: str) -> bool:
    return name.endswith(".message") and name.startswith("gen_ai.")


def _is_choice_event(name: str) -> bool:
    return name == "gen_ai.choice"


def _from_events(
    events: tuple[SpanEvent, ...],
    details_key: str,
    content_event: tuple[str, str],
    is_message_event: Callable[[str], bool],
) -> Any:
    for event in events:
        if event.name == OPERATION_DETAILS and details_key in event.attributes:
            return json_or_text(event.attributes[details_key])
        if event.name == content_event[0] and content_event[1] in event.attributes:
            return json_or_text(event.attributes[content_event[1]])
    found = [
        e.attributes for e in events if e.name != OPERATION_DETAILS and is_message_event(e.name)
    ]
    return found or None


INPUT_NAMES = ("gen_ai.input.messages", "input.value")
"""Where a span's input is, first first (:func:`input_of`)."""
OUTPUT_NAMES = ("gen_ai.output.messages", "output.value", "final_result")
"""Where a span's output is, first first (:func:`output_of`)."""
_INPUT_NAMES = frozenset(INPUT_NAMES)
_OUTPUT_NAMES = frozenset(OUTPUT_NAMES)


def input_of(span: Span) -> Any:
    return json_or_text(first(span.attributes, *INPUT_NAMES))


def output_of(span: Span) -> Any:
    return json_or_text(first(span.attributes, *OUTPUT_NAMES))


def input_object(span: Span) -> dict[str, Any]:
    """``as_dict(input_of(span))``: ``{}`` at once for a span that names no input (most step
    spans: tool and model calls say what they sent otherwise)."""
    if _INPUT_NAMES.isdisjoint(span.attributes):
        return {}
    return as_dict(input_of(span))


def output_object(span: Span) -> dict[str, Any]:
    """``as_dict(output_of(span))``, likewise."""
    if _OUTPUT_NAMES.isdisjoint(span.attributes):
        return {}
    return as_dict(output_of(span))
