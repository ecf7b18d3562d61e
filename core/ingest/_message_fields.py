"""Small readers of a chat message's fields, forgiving about where a format keeps them: text
content, token usage, timestamp, cost (on the message, in its ``extra``, or in the raw provider
response kept there), and a record's digest."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def digest_of(record: Any) -> str:
    canonical = json.dumps(record, sort_keys=True, default=str).encode()
    return hashlib.sha256(canonical).hexdigest()[:20]


def text_of(value: Any) -> str | None:
    return str(value)[:200] if value not in (None, "") else None


def content_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("text")]
        return "\n".join(map(str, texts)) or None
    return None


def extra_of(message: dict[str, Any]) -> dict[str, Any]:
    extra = message.get("extra")
    return extra if isinstance(extra, dict) else {}


def usage_of(message: dict[str, Any]) -> dict[str, Any]:
    """A message's token usage: ``usage`` on the message, in its ``extra``, or in the raw
    provider response kept in ``extra.response`` (mini-swe-agent 2.x keeps it only there)."""
    extra = extra_of(message)
    response = extra.get("response")
    for found in (
        message.get("usage"),
        extra.get("usage"),
        response.get("usage") if isinstance(response, dict) else None,
    ):
        if isinstance(found, dict) and found:
            return found
    return {}


def time_of(message: dict[str, Any] | None) -> float | None:
    if message is None:
        return None
    value = message.get("timestamp", extra_of(message).get("timestamp"))
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e11:
        return float(value)
    return None


def count_of(mapping: Any, *keys: str) -> int:
    if not isinstance(mapping, dict):
        return 0
    for key in keys:
        value = mapping.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


def cost_of(message: dict[str, Any]) -> float:
    value = message.get("cost", extra_of(message).get("cost"))
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e9:
        return float(value)
    return 0.0
