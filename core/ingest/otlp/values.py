"""Plain values out of span attributes: flattened keys rebuilt into lists and dicts, the first
of several keys that holds a text, an integer or a float, JSON text read where it is JSON, and
long values cut. Pure and total: a missing or odd value gives ``None``/``0``."""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Callable, Mapping
from typing import Any

from pydantic_core import to_json

MAX_VALUE_CHARS = 64 * 1024
"""Request, response, args and result values longer than this are cut (with a marker)."""


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


def text_or_none(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]  # (typeshed takes the scanner class for its context)
)
"""The scanner ``json.loads`` runs (its C one), as its default decoder makes it."""


def json_or_text(value: Any) -> Any:
    """``value`` read as JSON when it is a text that looks like a JSON object or array and is
    one (as ``json.loads`` reads it), else ``value`` itself."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:  # json.loads without its three Python frames: the text starts with its value
            found, end = _scan(value, 0)
            if end == len(value):
                return found
        except (StopIteration, ValueError, RecursionError):
            pass
        try:  # trailing whitespace, or an error: json.loads decides
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
