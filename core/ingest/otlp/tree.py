"""A trace's spans as a tree, and where its steps are.

Frameworks wrap the interesting part of a run in layers: one's own root span (set to carry
``steplog.task_instance_id``), a workflow or chain span, an agent span. The *step level* is
where the run branches into model and tool calls: below every single-child wrapper. Its
children are the steps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from .attributes import call_kind
from .spans import Span


def find_roots(spans: Iterable[Span]) -> list[Span]:
    """Spans with no parent, or whose parent is not among ``spans``; earliest first."""
    spans = list(spans)
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_span_id or s.parent_span_id not in ids]
    return sorted(roots, key=lambda s: (s.parent_span_id is not None, s.start_ns, s.span_id))


def _order(span: Span) -> tuple[int, str]:
    return (span.start_ns, span.span_id)


class SpanTree:
    """The spans of one trace (duplicates from exporter retries dropped), linked."""

    def __init__(self, spans: Iterable[Span]) -> None:
        self.by_id = {s.span_id: s for s in spans}
        self.spans = sorted(self.by_id.values(), key=_order)
        if not self.spans:
            raise ValueError("a trace without spans")
        self.trace_id = self.spans[0].trace_id
        self.roots = find_roots(self.spans)
        self.root = self.roots[0]
        self._children: dict[str, list[Span]] = defaultdict(list)
        self._subtrees: dict[str, list[Span]] = {}
        self._kinds = {s.span_id: call_kind(s) for s in self.spans}
        self._names: set[str] | None = None  # every attribute name, once asked for
        for span in self.spans:
            if span is not self.root and span.parent_span_id in self.by_id:
                self._children[span.parent_span_id].append(span)

    def kind_of(self, span: Span) -> str | None:
        """:func:`~.attributes.call_kind` of a span of this tree (read once per span)."""
        if self.by_id.get(span.span_id) is span:
            return self._kinds[span.span_id]
        return call_kind(span)

    def children_of(self, span: Span) -> list[Span]:
        """Direct children, in start order."""
        return self._children.get(span.span_id, [])

    def subtree(self, span: Span) -> list[Span]:
        """``span`` and all its descendants, in start order."""
        known = self._subtrees.get(span.span_id)
        if known is not None:
            return known
        if not self.children_of(span):
            self._subtrees[span.span_id] = [span]
            return [span]
        found = [span]
        stack = list(self.children_of(span))
        while stack:
            child = stack.pop()
            found.append(child)
            stack.extend(self.children_of(child))
        found.sort(key=_order)
        self._subtrees[span.span_id] = found
        return found

    def ancestors(self, span: Span) -> list[Span]:
        """``span`` and its parents up to its root, innermost first."""
        chain = [span]
        seen = {span.span_id}
        while chain[-1].parent_span_id in self.by_id and chain[-1] is not self.root:
            parent = self.by_id[chain[-1].parent_span_id or ""]
            if parent.span_id in seen:  # a cycle in bad input: stop
                break
            seen.add(parent.span_id)
            chain.append(parent)
        return chain

    def step_level(self) -> tuple[list[Span], list[Span]]:
        """``(wrappers, steps)``: the single-child chain from the root down to where the run
        branches, and the steps below it (plus spans whose parent never arrived)."""
        orphans = self.roots[1:]
        if self.kind_of(self.root):  # a model or tool call at the top: one step
            return [], sorted([self.root, *orphans], key=_order)
        wrappers = [self.root]
        node = self.root
        while True:
            children = self.children_of(node)
            if len(children) != 1 or self.kind_of(children[0]) or not self.children_of(children[0]):
                break
            node = children[0]
            wrappers.append(node)
        steps = sorted([*self.children_of(node), *orphans], key=_order)
        return wrappers, steps

    def gaps(self, limit: int = 20) -> list[str]:
        """Known gaps: spans whose parent never arrived (the trace lost spans on the way)."""
        missing = [s for s in self.roots if s.parent_span_id]
        found = [
            f"span {s.span_id} ({s.name[:80]!r}): its parent {s.parent_span_id} never arrived"
            for s in missing[:limit]
        ]
        if len(missing) > limit:
            found.append(f"... and {len(missing) - limit} more spans whose parent never arrived")
        return found

    def first_attribute(self, *keys: str) -> str | None:
        """The first of ``keys`` set on the root (or its resource), else on any span."""
        if self._names is None:
            self._names = set()
            for span in self.spans:
                self._names.update(span.attributes)
                self._names.update(span.resource)
        if self._names.isdisjoint(keys):
            return None  # the common case: a name no span carries
        for span in [self.root, *self.spans]:
            for source in (span.attributes, span.resource):
                for key in keys:
                    value = source.get(key)
                    if value not in (None, ""):
                        return str(value)[:200]
        return None
