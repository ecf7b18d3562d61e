"""Frameworks that break the conventions, translated into them before mapping.

The mapping reads the OpenTelemetry GenAI conventions and OpenInference kinds (see
``core/guide/mapping.md``). A framework whose tracer speaks a vocabulary of its own gets a
*dialect* here: a pure function from one of its spans to the convention attributes that say
the same thing, added beside the span's own (never replacing them). A dialect is chosen by the
span's instrumentation scope, so spans of every other framework pay one dictionary lookup.
Each rule names the version it was seen in. The archive keeps the spans as received.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from .span_model import Span

Dialect = Callable[[Span], dict[str, Any] | None]


def _json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return None


def _haystack(span: Span) -> dict[str, Any] | None:
    """Haystack 3.4 (``haystack-ai``) with ``opentelemetry-haystack`` 2.0: ``haystack.*``
    attributes only. ``haystack.agent.run`` is the agent; each ``haystack.agent.step.llm`` one
    chat request, its usage and model in the replies' ``meta``; each ``haystack.agent.step.tool``
    one tool call, failed when ``haystack.tool.error`` is true (the span's status stays unset)."""
    attrs = span.attributes
    name = span.name
    if name == "haystack.agent.run":
        return {"gen_ai.operation.name": "invoke_agent"}
    if name == "haystack.agent.step.llm":
        added: dict[str, Any] = {"gen_ai.operation.name": "chat"}
        output = _json(attrs.get("haystack.agent.step.llm.output"))
        replies = output.get("replies") if isinstance(output, dict) else None
        meta = replies[0].get("meta") if replies and isinstance(replies[0], dict) else None
        if isinstance(meta, dict):
            if isinstance(meta.get("model"), str):
                added["gen_ai.response.model"] = meta["model"]
            usage = meta.get("usage")
            if isinstance(usage, dict):
                for theirs, ours in (
                    ("prompt_tokens", "gen_ai.usage.input_tokens"),
                    ("completion_tokens", "gen_ai.usage.output_tokens"),
                ):
                    if isinstance(usage.get(theirs), int):
                        added[ours] = usage[theirs]
        if "haystack.agent.step.llm.output" in attrs:
            added["output.value"] = attrs["haystack.agent.step.llm.output"]
        return added
    if name == "haystack.agent.step.tool":
        added = {"gen_ai.operation.name": "execute_tool"}
        if "haystack.tool.name" in attrs:
            added["gen_ai.tool.name"] = attrs["haystack.tool.name"]
        if "haystack.agent.step.tool.input" in attrs:
            added["gen_ai.tool.call.arguments"] = attrs["haystack.agent.step.tool.input"]
        if "haystack.agent.step.tool.output" in attrs:
            added["output.value"] = attrs["haystack.agent.step.tool.output"]
        if attrs.get("haystack.tool.error") in (True, "true", "True"):
            added["error.type"] = "ToolInvocationError"
        return added
    return None


DIALECTS: dict[str, Dialect] = {"haystack": _haystack}
"""Instrumentation scope name -> its dialect."""


def in_conventions(spans: Iterable[Span]) -> list[Span]:
    """``spans`` with every dialect's convention attributes added (the span's own attributes
    win where both say something)."""
    found = spans if isinstance(spans, list) else list(spans)
    copied = False
    for index, span in enumerate(found):
        dialect = DIALECTS.get(span.scope)
        if dialect is None:  # nearly every span: one lookup, no copy
            continue
        added = dialect(span)
        if added:
            if not copied:
                found, copied = list(found), True
            found[index] = replace(span, attributes={**added, **span.attributes})
    return found


__all__ = ["DIALECTS", "in_conventions"]
