"""One real request is one call: the model and tool calls of a trace, nested duplicates merged.

Instrumentations stack: a framework's span for a tool call wraps the tool library's own
``execute_tool`` span (AutoGen AgentChat 0.7 with OpenInference: each tool call twice, one of
them without arguments); a framework's model span wraps the client library's span of the same
request (LangChain over the OpenAI SDK). The rule, by kind and nesting:

* a call span's *nested calls* are the call spans below it with no other call span between;
* a **model** span with exactly one nested model call describes that same request: the two are
  one call. With two or more it wraps several requests (retries, fallbacks) and is not a call
  itself;
* a **tool** span with exactly one nested tool call of the same tool name, whose arguments do not
  differ where both have them, is the same call; any other nesting (a tool that runs other
  tools, an agent used as a tool) keeps every call. Two names are the same tool when equal or
  when one is the other under a namespace (``mcp__weather__lookup`` and ``lookup``: a
  ``__``, ``.``, ``/`` or ``:`` before it);
* a tool span that lies, in time, inside another tool span with the same parent counts as
  nested in it: the context was lost on the way (the Claude Agent SDK 0.2 with OpenInference
  0.1.22 exports the MCP client's ``tools/call lookup`` span beside its own
  ``mcp__weather__lookup`` span, not under it);
* a merged call is reported once: its content (arguments, result, request, response, tokens)
  from the member that has the most of it, each field it lacks filled from the others, and in
  error if any member is, with the error of the innermost member in error.

A model-kind span that made no request is not a call at all (:func:`~.attributes.makes_request`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

from .attributes import (
    Usage,
    model_of,
    model_request,
    model_response,
    tool_args_of,
    tool_name_of,
    usage_of,
)
from .span_model import Span
from .tree import SpanTree


class Call(NamedTuple):
    """One real call: its kind, the spans that describe it (outermost first), and the innermost
    of them in error (where the exception came from), if any."""

    kind: str
    spans: tuple[Span, ...]
    error_span: Span | None


def _call(kind: str, spans: tuple[Span, ...]) -> Call:
    return Call(kind, spans, next((s for s in reversed(spans) if s.failed), None))


class Calls:
    """The calls of one trace, found once: by the span that starts each (its outermost)."""

    def __init__(self, tree: SpanTree) -> None:
        self.tree = tree
        self.by_start: dict[str, Call] = {}
        self._member_of: dict[str, str] = {}
        kind_of = tree.kind_of
        skipped: set[str] = set()
        member_of = self._member_of
        self._inside = _inside_siblings(tree)
        spans = tree.spans  # start order: an outer call before the calls nested in it
        if self._inside:  # ... and of two starting together, the longer first
            spans = sorted(spans, key=lambda s: (s.start_ns, -s.end_ns, s.span_id))
        for span in spans:
            kind = kind_of(span)
            if not kind or span.span_id in member_of or span.span_id in skipped:
                continue
            if not tree.children_of(span) and span.span_id not in self._inside:  # the common case
                member_of[span.span_id] = span.span_id
                self.by_start[span.span_id] = Call(kind, (span,), span if span.failed else None)
                continue
            chain = [span]
            while True:
                nested = self._nested(chain[-1])
                same = [c for c in nested if kind_of(c) == kind]
                if len(same) != 1 or not self._same_call(kind, chain[-1], same[0]):
                    if kind == "model" and len(same) > 1:  # a wrapper of several requests
                        skipped.update(s.span_id for s in chain)
                        chain = []
                    break
                chain.append(same[0])
            if not chain:
                continue
            for member in chain:
                member_of[member.span_id] = span.span_id
            self.by_start[span.span_id] = _call(kind, tuple(chain))

    def _nested(self, span: Span) -> list[Span]:
        """The call spans below ``span`` with no other call span between."""
        found: list[Span] = list(self._inside.get(span.span_id, ()))
        stack = list(self.tree.children_of(span))
        kind_of = self.tree.kind_of
        while stack:
            child = stack.pop()
            if kind_of(child):
                found.append(child)
            else:
                stack.extend(self.tree.children_of(child))
        return found

    @staticmethod
    def _same_call(kind: str, outer: Span, inner: Span) -> bool:
        if kind == "model":
            return True
        if not _same_tool(tool_name_of(outer), tool_name_of(inner)):
            return False
        mine, theirs = tool_args_of(outer), tool_args_of(inner)
        return mine is None or theirs is None or _comparable(mine) == _comparable(theirs)

    def errored_in(self, spans: list[Span]) -> list[Span]:
        """The calls in error among ``spans`` (a subtree), once each: by their innermost member
        in error."""
        get = self.by_start.get
        return [
            call.error_span
            for span in spans
            if (call := get(span.span_id)) is not None and call.error_span is not None
        ]


def model_content(spans: tuple[Span, ...]) -> tuple[Any, Any, Usage, str | None]:
    """A (merged) model call's request, response, usage and model: from the member that has
    the most of them, the innermost first on a tie, each gap filled from the others."""
    if len(spans) == 1:
        span = spans[0]
        return model_request(span), model_response(span), usage_of(span), model_of(span)
    found = [(model_request(s), model_response(s), usage_of(s), model_of(s)) for s in spans]

    def richness(i: int) -> tuple[int, int]:
        request, response, usage, _ = found[i]
        tokens = usage.input_tokens + usage.output_tokens > 0
        return (-(request is not None) - (response is not None) - tokens, -i)

    order = sorted(range(len(found)), key=richness)
    request = next((found[i][0] for i in order if found[i][0] is not None), None)
    response = next((found[i][1] for i in order if found[i][1] is not None), None)
    usage = next(
        (found[i][2] for i in order if found[i][2].input_tokens + found[i][2].output_tokens),
        found[order[0]][2],
    )
    model = next((found[i][3] for i in order if found[i][3] is not None), None)
    return request, response, usage, model


def _inside_siblings(tree: SpanTree) -> dict[str, list[Span]]:
    """``{tool span id: the tool spans with the same parent that lie inside it in time}``, for
    the tool spans that have any. A sweep in start order: linear for calls one after another."""
    tools = tree.of_kind("tool")
    if len(tools) < 2:
        return {}
    by_parent: defaultdict[str | None, list[Span]] = defaultdict(list)
    for span in tools:
        by_parent[span.parent_span_id].append(span)
    found: dict[str, list[Span]] = {}
    for group in by_parent.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda s: (s.start_ns, -s.end_ns, s.span_id))
        for n, outer in enumerate(group):
            inside = []
            for other in group[n + 1 :]:
                if other.start_ns > outer.end_ns:
                    break
                if other.end_ns <= outer.end_ns and (other.start_ns, other.end_ns) != (
                    outer.start_ns,
                    outer.end_ns,
                ):
                    inside.append(other)
            if inside:
                found[outer.span_id] = inside
    return found


_NAMESPACE_MARKS = ("__", ".", "/", ":")


def _same_tool(one: str, other: str) -> bool:
    """Whether two tool names name one tool: equal, or one the other under a namespace."""
    if one == other:
        return True
    short, long = sorted((one, other), key=len)
    return any(long.endswith(mark + short) for mark in _NAMESPACE_MARKS)


def _comparable(value: Any) -> Any:
    """Arguments as compared: a JSON text and its object are the same arguments."""
    return value if not isinstance(value, str) else value.strip()


__all__ = ["Call", "Calls", "model_content"]
