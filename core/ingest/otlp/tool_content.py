"""A tool call's arguments and result, read from the spans that make up the call (one request
can be several nested spans): pure, no I/O."""

from __future__ import annotations

from typing import Any

from .attributes import tool_args_of, tool_name_of, tool_result_of
from .span_model import Span
from .values import json_or_text


def tool_content(spans: tuple[Span, ...], by_id: dict[str, Span]) -> tuple[Any, Any]:
    """A tool call's arguments and result: from the member that has both (else most), the
    innermost first on a tie, each gap filled from the others (``by_id``: the trace's spans)."""
    if len(spans) == 1:
        return tool_args(spans[0], by_id), tool_result_of(spans[0])
    found = [(tool_args(s, by_id), tool_result_of(s)) for s in spans]
    order = sorted(
        range(len(found)),
        key=lambda i: (-(found[i][0] is not None) - (found[i][1] is not None), -i),
    )
    args = next((found[i][0] for i in order if found[i][0] is not None), None)
    result = next((found[i][1] for i in order if found[i][1] is not None), None)
    return args, result


def tool_args(span: Span, by_id: dict[str, Span]) -> Any:
    """The call's arguments; a bare value (LangChain records a one-argument tool's input as
    the value alone) is replaced by the arguments its parent dispatched, when it has them."""
    args = tool_args_of(span)
    parent = by_id.get(span.parent_span_id or "")
    if isinstance(args, dict) or parent is None:
        return args
    dispatched = _dispatched_call(parent, tool_name_of(span))
    return dispatched if dispatched is not None else args


def _dispatched_call(parent: Span, tool: str) -> Any:
    """The arguments of the one tool call ``parent`` dispatched to ``tool`` (LangGraph's tool
    node carries ``{"tool_call": {"name", "args"}}`` as its input), else ``None``."""
    value = json_or_text(parent.attributes.get("input.value"))
    call = value.get("tool_call") if isinstance(value, dict) else None
    if isinstance(call, dict) and call.get("name") == tool and isinstance(call.get("args"), dict):
        return call["args"]
    return None


__all__ = ["tool_args", "tool_content"]
