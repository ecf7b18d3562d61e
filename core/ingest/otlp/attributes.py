"""Reading what a span means from its attributes: OpenTelemetry GenAI conventions (current and
deprecated), OpenInference's flattened attributes, and the few names frameworks add of their own.

Every function here is pure and total: a missing or odd attribute gives ``None``/``0``, never an
exception.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_json

from .spans import Span

MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
TOOL_OPERATIONS = frozenset({"execute_tool"})
MAX_VALUE_CHARS = 64 * 1024
"""Request, response, args and result values longer than this are cut (with a marker)."""
MAX_DETAIL_CHARS = 16 * 1024

_TRACEBACK = "Traceback (most recent call last)"
_SUMMARY = re.compile(r"^([^{:]{1,200}): (\{.*\})$", re.DOTALL)
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")


def operation(span: Span) -> str:
    """The GenAI operation (``chat``, ``execute_tool``, ``invoke_agent``...) of ``span``."""
    op = span.attributes.get("gen_ai.operation.name")
    if isinstance(op, str) and op:
        return op
    kind = span.attributes.get("openinference.span.kind")
    if isinstance(kind, str) and kind:
        return {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent"}.get(
            kind.upper(), kind.lower()
        )
    return ""


def call_kind(span: Span) -> str | None:
    """``model``, ``tool``, or ``None`` for a span that is neither call."""
    op = operation(span)
    if op in MODEL_OPERATIONS:
        return "model"
    if op in TOOL_OPERATIONS:
        return "tool"
    return None


def model_of(span: Span) -> str | None:
    return first_text(
        span.attributes, "gen_ai.response.model", "gen_ai.request.model", "llm.model_name"
    )


def tool_name_of(span: Span) -> str:
    return (
        first_text(span.attributes, "gen_ai.tool.name", "tool.name", "tool_call.function.name")
        or span.name
        or "tool"
    )


def tool_args_of(span: Span) -> Any:
    """The arguments the tool was called with (never OpenInference's ``tool.parameters``, which
    is the tool's JSON schema, not the call)."""
    return json_or_text(
        first(
            span.attributes,
            "gen_ai.tool.call.arguments",
            "input.value",
            "tool_arguments",
            "tool_call.function.arguments",
        )
    )


def tool_result_of(span: Span) -> Any:
    return json_or_text(
        first(span.attributes, "gen_ai.tool.call.result", "output.value", "tool_response")
    )


# --- usage -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    reasoning_tokens: int
    cost_usd: float


def usage_of(span: Span) -> Usage:
    """Tokens and cost of a model call, under any of the names in use."""
    attrs = span.attributes
    return Usage(
        input_tokens=first_int(
            attrs,
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.prompt_tokens",
            "llm.token_count.prompt",
        ),
        output_tokens=first_int(
            attrs,
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
            "llm.token_count.completion",
        ),
        cached_input_tokens=first_int(
            attrs,
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_read_input_tokens",
            "gen_ai.usage.details.cache_read_tokens",
            "llm.token_count.prompt_details.cache_read",
        ),
        reasoning_tokens=first_int(
            attrs,
            "gen_ai.usage.reasoning.output_tokens",
            "gen_ai.usage.reasoning_tokens",
            "gen_ai.usage.details.reasoning_tokens",
            "llm.token_count.completion_details.reasoning",
        ),
        cost_usd=first_float(
            attrs, "gen_ai.usage.cost", "llm.cost.total", "operation.cost", "gen_ai.cost"
        ),
    )


# --- messages --------------------------------------------------------------------------------


def model_request(span: Span) -> Any:
    return _messages(
        span,
        ("gen_ai.input.messages", "gen_ai.prompt"),
        "llm.input_messages",
        lambda name: (
            name.startswith("gen_ai.")
            and name.endswith("message")
            and name != "gen_ai.assistant.message"
        ),
        "input.value",
    )


def model_response(span: Span) -> Any:
    return _messages(
        span,
        ("gen_ai.output.messages", "gen_ai.completion"),
        "llm.output_messages",
        lambda name: name == "gen_ai.choice",
        "output.value",
    )


def _messages(
    span: Span,
    keys: tuple[str, ...],
    flattened: str,
    is_message_event: Callable[[str], bool],
    fallback: str,
) -> Any:
    """One side of a model call, from the first place that has it: the GenAI attributes
    (current or deprecated), OpenInference's flattened list, span events, or the plain value."""
    found = first(span.attributes, *keys)
    if found is not None:
        return json_or_text(found)
    flat = unflatten(span.attributes, flattened)
    if flat is not None:
        return flat
    events = [e.attributes for e in span.events if is_message_event(e.name)]
    if events:
        return events
    return json_or_text(span.attributes.get(fallback))


def input_of(span: Span) -> Any:
    return json_or_text(first(span.attributes, "gen_ai.input.messages", "input.value"))


def output_of(span: Span) -> Any:
    return json_or_text(
        first(span.attributes, "gen_ai.output.messages", "output.value", "final_result")
    )


# --- errors ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What went wrong in a span: a short type and message for signatures, and the long
    text (a stack trace) kept apart as ``detail``."""

    error_type: str
    message: str
    detail: str | None
    specific: bool
    """Whether the span said what the error was (an exception event or ``error.type``)."""


def error_of(span: Span) -> ErrorInfo:
    """The error of a failed span, from its ``exception`` event first (type, message,
    stack trace), then ``error.type``, then the status message (a traceback there is parsed
    for its last line and kept as the detail)."""
    attrs = span.attributes
    exc_type = exc_message = stack = None
    for event in span.events:
        if event.name == "exception":
            exc_type = _text(event.attributes.get("exception.type")) or exc_type
            exc_message = _text(event.attributes.get("exception.message")) or exc_message
            stack = _text(event.attributes.get("exception.stacktrace")) or stack
    status = span.status_message or ""
    traceback_type, traceback_message = _from_traceback(status)
    if not traceback_type:
        traceback_type, traceback_message = _from_summary(status)
    error_type = exc_type or _text(attrs.get("error.type")) or traceback_type
    if exc_message is not None:
        message = exc_message
    elif traceback_type:
        message = traceback_message
    else:
        message = _without_type_prefix(status.strip(), error_type)
    detail = stack or (status if traceback_type else None)
    if error_type and message.startswith(f"{error_type}: "):
        message = message[len(error_type) + 2 :]
    return ErrorInfo(
        error_type=(error_type or "SpanError")[:200],
        message=message.strip(),
        detail=detail[-MAX_DETAIL_CHARS:] if detail else None,
        specific=bool(exc_type or attrs.get("error.type")),
    )


def _from_traceback(text: str) -> tuple[str | None, str]:
    """``(type, message)`` from the last line of a Python traceback, else ``(None, "")``."""
    if _TRACEBACK not in text:
        return None, ""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if not line or line.startswith(("File ", "^", "~", "During handling", "The above")):
            continue
        match = _EXCEPTION_LINE.match(line)
        if match:
            return match.group(1).rsplit(".", 1)[-1], (match.group(2) or "").strip()
        return "Exception", line
    return "Exception", ""


def _from_summary(text: str) -> tuple[str | None, str]:
    """``(summary, error)`` from a status like ``Error in agent run: {'error': 'boom'}`` (the
    OpenAI Agents SDK's span errors, as OpenInference writes them), else ``(None, "")``."""
    match = _SUMMARY.match(text.strip())
    if not match:
        return None, ""
    try:
        data = ast.literal_eval(match.group(2))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None, ""
    if not isinstance(data, dict) or not isinstance(data.get("error"), str):
        return None, ""
    return match.group(1).strip(), data["error"]


def _without_type_prefix(message: str, error_type: str | None) -> str:
    if error_type:
        short = error_type.rsplit(".", 1)[-1]
        for prefix in (f"{error_type}: ", f"{short}: "):
            if message.startswith(prefix):
                return message[len(prefix) :]
    return message


# --- plain values ----------------------------------------------------------------------------


def unflatten(attrs: Mapping[str, Any], prefix: str) -> Any:
    """Rebuild ``prefix.0.message.role``-style keys into nested lists and dicts."""
    marker = prefix + "."
    items = [(k[len(marker) :].split("."), v) for k, v in attrs.items() if k.startswith(marker)]
    if not items:
        return None
    tree: dict[str, Any] = {}
    for path, value in sorted(items, key=lambda kv: [_sort_key(p) for p in kv[0]]):
        node = tree
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                child = node[part] = {"": child}
            node = child
        node[path[-1]] = value
    return _lists(tree)


def _sort_key(part: str) -> tuple[int, int | str]:
    return (0, int(part)) if part.isdigit() else (1, part)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    converted = {key: _lists(value) for key, value in node.items()}
    if converted and all(key.isdigit() for key in converted):
        return [converted[key] for key in sorted(converted, key=int)]
    return converted


def first(attrs: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = attrs.get(key)
        if value not in (None, ""):
            return value
    return None


def first_text(attrs: Mapping[str, Any], *keys: str) -> str | None:
    value = first(attrs, *keys)
    return str(value)[:200] if value is not None else None


def first_int(attrs: Mapping[str, Any], *keys: str) -> int:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, float) and value >= 0 and value.is_integer():
            return int(value)
    return 0


def first_float(attrs: Mapping[str, Any], *keys: str) -> float:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                continue
        if isinstance(value, int | float) and 0 <= value < float("inf"):
            return float(value)
    return 0.0


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def json_or_text(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):  # not JSON after all, or an absurd integer
            return value
    return value


def cut(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and len(value) <= MAX_VALUE_CHARS // 6:  # short even if escaped
        return value
    try:  # compact UTF-8 JSON, much faster to write: json.dumps' text is at most 6x as long
        if len(to_json(value)) <= MAX_VALUE_CHARS // 6:
            return value
    except (ValueError, TypeError, RecursionError):
        pass  # not plain JSON data (json.dumps writes it with str)
    text = json.dumps(value, default=str)
    if len(text) <= MAX_VALUE_CHARS:
        return value
    return {"truncated": True, "chars": len(text), "head": text[:MAX_VALUE_CHARS]}


def as_dict(value: Any) -> dict[str, Any]:
    value = cut(value)
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    return {"value": value}
