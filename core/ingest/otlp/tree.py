"""A trace's spans as a tree, and where its steps are.

Frameworks wrap the interesting part of a run in layers: one's own root span (set to carry
``steplog.task_instance_id``), a workflow or chain span, an agent span. The *step level* is
where the run branches into model and tool calls: below every single-child wrapper. Its
children are the steps.

Any set of spans makes a tree, by three rules over the parent pointers (never an error):

* **duplicates**: of several spans with one span id, the first is kept (as staging keeps the
  first version received);
* **cycles**: a span whose parent chain comes back to itself (its own parent, two spans
  parenting each other, longer loops) loses the parent pointer of the cycle's earliest span
  (by start time, then span id), which becomes top-level;
* **the root**: the one span without a parent id. When no span lacks one (the root never
  arrived, or the only candidates sat on a cycle) or several do, every top-level span (no
  parent, a parent that never arrived, or a cycle cut) is put under a *synthetic root* that
  no exporter sent (span id all zeros, which OTLP forbids, so it never collides), spanning
  them all and with no status: :attr:`SpanTree.synthetic` says so, and :meth:`SpanTree.gaps`
  says why. With one real root, spans whose parent never arrived are extra steps under it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from .attributes import call_kind
from .span_model import Span

SYNTHETIC_ROOT_ID = "0" * 16
"""The span id of a synthetic root: all zeros, which no valid OTLP span carries."""


def find_roots(spans: Iterable[Span]) -> list[Span]:
    """Spans with no parent, or whose parent is not among ``spans``; earliest first."""
    spans = list(spans)
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_span_id or s.parent_span_id not in ids]
    return sorted(roots, key=lambda s: (s.parent_span_id is not None, s.start_ns, s.span_id))


def has_one_root(spans: Iterable[Span]) -> bool:
    """Whether exactly one of ``spans`` has no parent: else a tree of them has a synthetic root."""
    return sum(1 for s in spans if not s.parent_span_id) == 1


def _order(span: Span) -> tuple[int, str]:
    return (span.start_ns, span.span_id)


def _repeats(spans: list[Span]) -> dict[str, int]:
    """How many times each repeated span id appears in ``spans``."""
    counts: dict[str, int] = {}
    for span in spans:
        counts[span.span_id] = counts.get(span.span_id, 0) + 1
    return {span_id: n for span_id, n in counts.items() if n > 1}


def _cut_cycles(parent: dict[str, str | None], by_id: dict[str, Span]) -> list[str]:
    """Break every cycle of ``parent`` (span id -> parent id among the spans, or ``None``) in
    place at its earliest span; return the spans cut loose. Linear: each span is walked once."""
    state: dict[str, int] = {}  # 1: on the walk under way, 2: done
    cut: list[str] = []
    for start in parent:
        walk: list[str] = []
        node: str | None = start
        while node is not None and node not in state:
            state[node] = 1
            walk.append(node)
            node = parent[node]
        if node is not None and state[node] == 1:  # the walk came back to itself
            loop = walk[walk.index(node) :]
            first = min(loop, key=lambda i: _order(by_id[i]))
            parent[first] = None
            cut.append(first)
        for visited in walk:
            state[visited] = 2
    return cut


def _link(spans: list[Span], by_id: dict[str, Span]) -> tuple[dict[str, list[Span]], list[Span]]:
    """Children by parent id and the top-level spans (no parent among ``by_id``), in the order
    of ``spans``."""
    children: dict[str, list[Span]] = defaultdict(list)
    top = []
    for span in spans:
        up = span.parent_span_id
        if up in by_id:
            children[up].append(span)
        else:
            top.append(span)
    return children, top


def _reachable(top: list[Span], children: dict[str, list[Span]]) -> int:
    """How many spans hang from ``top`` (each has one parent: none is counted twice)."""
    count, stack = len(top), list(top)
    while stack:
        below = children.get(stack.pop().span_id)
        if below:
            count += len(below)
            stack.extend(below)
    return count


class SpanTree:
    """The spans of one trace, linked (see the module docstring for the rules)."""

    def __init__(self, spans: Iterable[Span]) -> None:
        given = list(spans)
        self.by_id = by_id = {s.span_id: s for s in reversed(given)}  # the first of each id
        self._repeats = _repeats(given) if len(by_id) != len(given) else {}
        self.spans = sorted(by_id.values(), key=_order)
        if not self.spans:
            raise ValueError("a trace without spans")
        self.trace_id = self.spans[0].trace_id
        children, top = _link(self.spans, by_id)
        self._cycles: list[str] = []
        if _reachable(top, children) != len(self.spans):  # a cycle: cut it, link again
            parent = {s.span_id: s.parent_span_id if s.parent_span_id in by_id else None
                      for s in self.spans}  # fmt: skip
            self._cycles = _cut_cycles(parent, by_id)
            cut = set(self._cycles)
            children, top = _link([s for s in self.spans if s.span_id not in cut], by_id)
            top = sorted([*top, *(by_id[i] for i in cut)], key=_order)
        claimants = [s for s in top if not s.parent_span_id]
        self._claimants = len(claimants)
        self.synthetic = len(claimants) != 1
        self.root_missing = not claimants
        """No span claims to be the root: it never arrived (or sat on a cycle)."""
        self.root = _synthetic_root(top, self.spans) if self.synthetic else claimants[0]
        self.roots = [self.root, *(s for s in top if s is not self.root)]
        if self.synthetic:
            children[self.root.span_id] = top
        self._children = children
        self._subtrees: dict[str, list[Span]] = {}
        self._kinds = {s.span_id: call_kind(s) for s in self.spans}
        if self.synthetic:
            self._kinds[SYNTHETIC_ROOT_ID] = None
        self._names: set[str] | None = None  # every attribute name, once asked for

    def kind_of(self, span: Span) -> str | None:
        """:func:`~.attributes.call_kind` of a span of this tree (read once per span)."""
        if self.by_id.get(span.span_id) is span or span is self.root:
            return self._kinds[span.span_id]
        return call_kind(span)

    def of_kind(self, kind: str) -> list[Span]:
        """The spans of this tree that are ``kind`` calls (``model`` or ``tool``), start order."""
        kinds = self._kinds
        return [span for span in self.spans if kinds.get(span.span_id) == kind]

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
        while True:  # cycles are cut: every chain ends
            up = chain[-1].parent_span_id
            if up not in self.by_id or chain[-1].span_id in self._cycles:
                break
            chain.append(self.by_id[up])
        if self.synthetic and chain[-1] is not self.root:
            chain.append(self.root)
        return chain

    def step_level(self) -> tuple[list[Span], list[Span]]:
        """``(wrappers, steps)``: the single-child chain from the root down to where the run
        branches, and the steps below it (plus spans whose parent never arrived)."""
        orphans = [] if self.synthetic else self.roots[1:]
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
        """Known gaps: a root that never came, spans whose parent never arrived, parent
        pointers cut to break a cycle, span ids sent more than once."""
        found = []
        if self.synthetic:
            top = len(self.roots) - 1
            if self._claimants:
                why = f"{self._claimants} spans have no parent"
            else:
                why = "the root span never arrived"
            found.append(f"{why}: its {top} top-level span(s) are under a synthetic root")
        missing = [
            s for s in self.roots[1:] if s.parent_span_id and s.parent_span_id not in self.by_id
        ]
        found += [
            f"span {s.span_id} ({s.name[:80]!r}): its parent {s.parent_span_id} never arrived"
            for s in missing[:limit]
        ]
        if len(missing) > limit:
            found.append(f"... and {len(missing) - limit} more spans whose parent never arrived")
        for span_id in self._cycles[:limit]:
            span = self.by_id[span_id]
            found.append(
                f"span {span_id} ({span.name[:80]!r}): its parent {span.parent_span_id} is itself "
                "or its own descendant (a cycle): taken as top-level"
            )
        for span_id, count in list(self._repeats.items())[:limit]:
            found.append(f"span {span_id} was sent {count} times: the first kept")
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


def _synthetic_root(top: list[Span], spans: list[Span]) -> Span:
    """A root for the ``top``-level spans of ``spans`` whose real root never came: spanning
    them all, no status, the resource of the earliest (its ``service.name`` names the run)."""
    first = top[0]
    return Span(
        trace_id=first.trace_id,
        span_id=SYNTHETIC_ROOT_ID,
        parent_span_id=None,
        name="",
        kind=0,
        start_ns=min(s.start_ns for s in spans),
        end_ns=max(max(s.end_ns, s.start_ns) for s in spans),
        attributes={},
        resource=first.resource,
        scope=first.scope,
    )
