"""Model call payloads as chat messages, whatever wrote them.

A ``ModelCalled`` request or response is free-form JSON: the harness writes its own dicts, the
OTLP importer keeps GenAI semantic-convention messages (``parts``), OpenInference's flattened
``message`` objects or span events, and the Inspect importer keeps ``new_messages`` with
``tool_calls``. :func:`messages` turns any of these into one shape the UI can render as a
conversation; anything it does not recognise becomes a single message with the JSON as text.
Pure functions, no Streamlit, so they are tested directly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the assistant asked for."""

    name: str
    arguments: str
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message: role, text, the tool calls it makes, the error it carries."""

    role: str
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    name: str | None = None  # the tool a tool message answers for
    error: str | None = None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=1, default=str, ensure_ascii=False)


def _role(value: Any, default: str) -> str:
    role = str(value or default).lower()
    return {"human": "user", "ai": "assistant", "model": "assistant", "function": "tool"}.get(
        role, role
    )


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else _text(value)


def _tool_call(data: Any) -> ToolCall:
    if not isinstance(data, dict):
        return ToolCall(name="tool", arguments=_text(data))
    data = data.get("tool_call", data)  # OpenInference wraps each call
    function = data.get("function")
    if isinstance(function, dict):  # OpenAI shape
        return ToolCall(
            name=str(function.get("name") or "tool"),
            arguments=_arguments(function.get("arguments")),
            id=data.get("id"),
        )
    return ToolCall(
        name=str(function or data.get("name") or "tool"),
        arguments=_arguments(data.get("arguments", data.get("args"))),
        id=data.get("id"),
    )


def _from_parts(role: str, parts: list[Any], data: dict[str, Any]) -> Message:
    """GenAI semantic conventions: content as typed parts."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for part in parts:
        if not isinstance(part, dict):
            texts.append(_text(part))
            continue
        kind = part.get("type")
        if kind == "tool_call":
            calls.append(_tool_call(part))
        elif kind == "tool_call_response":
            role = "tool"
            texts.append(_text(part.get("response", part.get("result"))))
        elif kind in ("text", "reasoning", None):
            texts.append(_text(part.get("content", part.get("text"))))
        else:
            texts.append(f"[{kind}]")
    return Message(role=role, text="\n".join(t for t in texts if t), tool_calls=calls)


def _message(data: Any, default_role: str) -> Message | None:
    """One message, or None when ``data`` does not look like one."""
    if not isinstance(data, dict):
        return None
    if "message" in data and isinstance(data["message"], dict):  # OpenInference, gen_ai.choice
        inner = dict(data["message"])
        return _message(inner, default_role)
    if not ({"role", "content", "parts", "tool_calls"} & data.keys()):
        return None
    role = _role(data.get("role"), default_role)
    if isinstance(data.get("parts"), list):
        return _from_parts(role, data["parts"], data)
    error = data.get("error")
    if isinstance(error, dict):
        error = f"{error.get('type') or 'error'}: {error.get('message') or ''}".strip()
    content = data.get("content")
    if isinstance(content, list):  # content parts (OpenAI/Anthropic style)
        parsed = _from_parts(role, content, data)
        text = parsed.text
    else:
        text = _text(content)
    calls = [_tool_call(c) for c in data.get("tool_calls") or []]
    name = data.get("function") if role == "tool" else data.get("name")
    return Message(
        role=role,
        text=text,
        tool_calls=calls,
        name=str(name) if name else None,
        error=str(error) if error else None,
    )


def messages(payload: Any, default_role: str) -> list[Message]:
    """The chat messages in one side of a model call (``default_role`` when none is named)."""
    if payload is None:
        return []
    if isinstance(payload, str):
        try:
            parsed = json.loads(payload)
        except ValueError:
            return [Message(role=default_role, text=payload)]
        if isinstance(parsed, (dict, list)):
            return messages(parsed, default_role)
        return [Message(role=default_role, text=payload)]
    if isinstance(payload, dict):
        for key in ("messages", "new_messages", "choices", "output"):
            found = payload.get(key)
            if isinstance(found, list) and found and all(isinstance(m, dict) for m in found):
                listed = [_message(m, default_role) for m in found]
                if all(m is not None for m in listed):
                    return [m for m in listed if m is not None]
        single = _message(payload, default_role)
        if single is not None:
            return [single]
        return [Message(role=default_role, text=_text(payload))]
    if isinstance(payload, list):
        listed = [_message(m, default_role) for m in payload]
        if listed and all(m is not None for m in listed):
            return [m for m in listed if m is not None]
    return [Message(role=default_role, text=_text(payload))]
