"""Building OTLP/JSON trace requests for tests, the way the specification spells them."""

from __future__ import annotations

import json
import random
from typing import Any

T0 = 1_764_460_800_000_000_000  # 2025-11-30T00:00:00Z in nanoseconds


def hex_id(rng: random.Random, size: int) -> str:
    return f"{rng.getrandbits(size * 8) | 1:0{size * 2}x}"


def attrs(**values: Any) -> list[dict[str, Any]]:
    """OTLP key-values; dots in keys are written as ``__``."""
    out = []
    for key, value in values.items():
        key = key.replace("__", ".")
        if isinstance(value, bool):
            typed: dict[str, Any] = {"boolValue": value}
        elif isinstance(value, int):
            typed = {"intValue": str(value)}
        elif isinstance(value, float):
            typed = {"doubleValue": value}
        else:
            typed = {"stringValue": str(value)}
        out.append({"key": key, "value": typed})
    return out


def span(
    trace_id: str,
    span_id: str,
    name: str,
    *,
    parent: str | None = None,
    start: int = 0,
    end: int = 1,
    error: str | None = None,
    message: str = "",
    **attributes: Any,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(T0 + start * 1_000_000),
        "endTimeUnixNano": str(T0 + end * 1_000_000),
        "attributes": attrs(**attributes),
        "status": {"code": 2, "message": message} if error else {},
    }
    if parent:
        doc["parentSpanId"] = parent
    if error:
        doc["attributes"] += attrs(error__type=error)
    return doc


def request(*spans: dict[str, Any], service: str = "travel-agent") -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": attrs(service__name=service)},
                "scopeSpans": [{"scope": {"name": "tests"}, "spans": list(spans)}],
            }
        ]
    }


def agent_trace(
    rng: random.Random,
    *,
    version: str = "gpt-4o",
    fail_tool: bool = False,
    instance: str = "trip-1",
) -> list[dict[str, Any]]:
    """An agent run: invoke_agent root, a chat step and a tool step; children first."""
    trace = hex_id(rng, 16)
    root, chat, tool = (hex_id(rng, 8) for _ in range(3))
    return [
        span(
            trace,
            chat,
            f"chat {version}",
            parent=root,
            start=1,
            end=5,
            gen_ai__operation__name="chat",
            gen_ai__request__model=version,
            gen_ai__usage__input_tokens=100,
            gen_ai__usage__output_tokens=20,
        ),
        span(
            trace,
            tool,
            "execute_tool search_flights",
            parent=root,
            start=6,
            end=9,
            error="TimeoutError" if fail_tool else None,
            message="flight api timed out after 30 s",
            gen_ai__operation__name="execute_tool",
            gen_ai__tool__name="search_flights",
            gen_ai__tool__call__arguments=json.dumps({"to": "LIS"}),
        ),
        span(
            trace,
            root,
            "invoke_agent planner",
            start=0,
            end=10,
            error="TimeoutError" if fail_tool else None,
            gen_ai__operation__name="invoke_agent",
            gen_ai__agent__name="planner",
            gen_ai__request__model=version,
            steplog__task_instance_id=instance,
        ),
    ]
