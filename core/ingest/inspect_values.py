"""Pure helpers for Inspect AI values: clipping, chat messages, tool results, errors, scores,
times (used by :mod:`.inspect_map`)."""

from __future__ import annotations

import ast
import importlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from pydantic_core import to_jsonable_python

from ..events import JsonDict
from .redaction import Redactor

MAX_TEXT: Final = 4000
"""Characters kept of one string in requests, responses, tool arguments and results."""
MAX_MESSAGE: Final = 2000
MAX_ITEMS: Final = 50
MAX_FIELD: Final = 200_000
"""Characters of JSON one clipped value may take (an event's payload limit is 1 MiB)."""
MAX_DEPTH: Final = 8
TASK_TYPE_KEYS: Final = ("task_type", "category", "type", "subset")

_REPR: Final = re.compile(r"^([A-Za-z_][\w.]*)\((.*)\)$", re.DOTALL)
_TRACEBACK_LINE: Final = re.compile(r"^([A-Za-z_][\w.]*): (.*)$")
_SCORING_SPANS: Final = frozenset({"scorers", "scorer"})


def _clean(redactor: Redactor, value: Any, max_text: int = MAX_TEXT) -> Any:
    """JSON-safe, redacted, clipped."""
    return _bounded(redactor.value(to_jsonable_python(value, fallback=str)), max_text)


def _text(redactor: Redactor, value: str | None, limit: int = MAX_MESSAGE) -> str:
    """Redacted and clipped text."""
    return str(_clip(redactor.text(value or ""), limit))


def _clip(value: Any, max_text: int, max_items: int = MAX_ITEMS, depth: int = 0) -> Any:
    """Long strings and lists cut with a marker, NUL replaced, nesting bounded."""
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        if len(value) > max_text:
            return value[:max_text] + f"...[{len(value) - max_text} more characters]"
        return value
    if depth >= MAX_DEPTH and isinstance(value, dict | list):
        return _clip(json.dumps(value, default=str), max_text)
    if isinstance(value, dict):
        items = list(value.items())
        clipped = {
            _clip(str(key), 200): _clip(item, max_text, max_items, depth + 1)
            for key, item in items[:max_items]
        }
        if len(items) > max_items:
            clipped["..."] = f"{len(items) - max_items} more keys"
        return clipped
    if isinstance(value, list):
        kept = [_clip(item, max_text, max_items, depth + 1) for item in value[:max_items]]
        if len(value) > max_items:
            kept.append(f"...[{len(value) - max_items} more items]")
        return kept
    if isinstance(value, float) and value != value:
        return "NaN"
    return value


def _bounded(value: Any, max_text: int) -> Any:
    """:func:`_clip`, cut harder while the JSON is still over :data:`MAX_FIELD` characters."""
    for text_limit, items in ((max_text, MAX_ITEMS), (500, 10), (100, 3)):
        clipped = _clip(value, text_limit, items)
        if not isinstance(clipped, dict | list):
            return clipped
        size = len(json.dumps(clipped, default=str))
        if size <= MAX_FIELD:
            return clipped
    return f"[{size:,} characters of JSON: too large to keep]"


def _message(message: Any) -> JsonDict:
    """A chat message as plain JSON: role, text, tool calls or the tool's error."""
    data: JsonDict = {"role": getattr(message, "role", None), "content": _content(message)}
    calls = getattr(message, "tool_calls", None)
    if calls:
        data["tool_calls"] = [{"function": c.function, "arguments": c.arguments} for c in calls]
    if data["role"] == "tool":
        data["function"] = getattr(message, "function", None)
        error = getattr(message, "error", None)
        if error is not None:
            data["error"] = {"type": error.type, "message": error.message}
    return data


def _content(message: Any) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        kind = getattr(part, "type", "")
        if kind == "text":
            parts.append(str(part.text))
        elif kind == "reasoning":
            continue  # long, often encrypted, and not what the model answered
        else:
            parts.append(f"[{kind}]")
    return "\n".join(parts)


def _messages_or_text(value: Any) -> Any:
    if isinstance(value, str):
        return value
    return [_message(m) for m in value or []]


def _new_messages(messages: Sequence[Any]) -> list[Any]:
    """The messages after the last assistant message: what is new since the model spoke."""
    for index in range(len(messages) - 1, -1, -1):
        if getattr(messages[index], "role", None) == "assistant":
            return list(messages[index + 1 :])
    return list(messages)


def _tool_result(result: Any) -> Any:
    if isinstance(result, str | int | float | bool) or result is None:
        return result
    if isinstance(result, list):
        return [_tool_result(item) for item in result]
    kind = getattr(result, "type", None)
    if kind == "text":
        return getattr(result, "text", "")
    return f"[{kind or type(result).__name__}]"


def _tool_error_type(kind: Any) -> str:
    return "tool_error" if kind in (None, "unknown") else f"tool_{kind}"


def _task_type(metadata: Mapping[str, Any] | None) -> str | None:
    for key in TASK_TYPE_KEYS:
        value = (metadata or {}).get(key)
        if isinstance(value, str) and 0 < len(value) <= 100:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None


def _exception_of(message: str | None, traceback: str | None) -> tuple[str, str]:
    """(exception class name, message) of an Inspect ``EvalError``."""
    text = (message or "").strip()
    found = _REPR.match(text)
    if found:
        name = found.group(1).rsplit(".", 1)[-1]
        inner = found.group(2)
        try:
            literal = ast.literal_eval(inner) if inner else ""
            inner = literal if isinstance(literal, str) else inner
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
        return name, inner or name
    for line in reversed((traceback or "").splitlines()):
        stripped = line.strip().lstrip("|").strip()
        hit = _TRACEBACK_LINE.match(stripped)
        if hit and not stripped.startswith("File "):
            return hit.group(1).rsplit(".", 1)[-1], text or hit.group(2)
    return "SampleError", text or "the sample failed"


def _is_correct(value: Any) -> bool | None:
    """Whether a score value means correct (``None``: no value to judge)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        judged = [_is_correct(v) for v in value.values()]
    elif isinstance(value, list | tuple):
        judged = [_is_correct(v) for v in value]
    else:
        try:
            to_float = importlib.import_module("inspect_ai.scorer").value_to_float()
            return bool(to_float(value) >= 1.0)
        except Exception:  # an unusual value type: not judged
            return None
    known = [j for j in judged if j is not None]
    return all(known) if known else None


def _show_value(value: Any) -> str:
    text = json.dumps(to_jsonable_python(value, fallback=str))
    return text[1:-1] if isinstance(value, str) and text.startswith('"') else text[:200]


def _quoted(text: str | None) -> str:
    """``"text"`` with inner double quotes made single, so a signature masks it as one value."""
    return '"' + (text or "").replace('"', "'")[:500] + '"'


def _summary(text: str) -> str | None:
    line = " ".join(text.split())
    return line or None


def _positive_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and value >= 1 else None


def _positive_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _in_scoring(spans: Mapping[str, tuple[str | None, str | None]], span_id: str | None) -> bool:
    seen = 0
    while span_id is not None and span_id in spans and seen < 100:
        kind, parent = spans[span_id]
        if kind in _SCORING_SPANS:
            return True
        span_id, seen = parent, seen + 1
    return False


def _last_time(events: Sequence[Any], kind: str) -> datetime | None:
    for event in reversed(events):
        if getattr(event, "event", None) == kind:
            return _utc(event.timestamp)
    return None


def _first_score_time(events: Sequence[Any]) -> datetime | None:
    for event in events:
        if getattr(event, "event", None) == "score" and not getattr(event, "intermediate", False):
            return _utc(event.timestamp)
    return None


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return _utc(value)
    if isinstance(value, str) and value:
        try:
            return _utc(datetime.fromisoformat(value))
        except ValueError:
            return None
    return None


def _sample_start(sample: Any, spec: Any) -> datetime:
    started = _parse_time(sample.started_at)
    if started is None:
        events = list(sample.events or [])
        started = _utc(events[0].timestamp) if events else _parse_time(spec.created)
    return started or datetime(1970, 1, 1, tzinfo=UTC)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
