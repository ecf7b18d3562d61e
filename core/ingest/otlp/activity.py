"""What in a trace is agent activity: whether the trace is a run at all, and which spans are
its steps. See ``core/guide/mapping.md``."""

from __future__ import annotations

from .attributes import is_activity
from .span_model import Span
from .tree import SpanTree


def is_phantom(tree: SpanTree) -> bool:
    """Whether a trace is not a run: it speaks the GenAI conventions (a ``gen_ai.operation.name``
    or an OpenInference kind) but shows no agent, model or tool activity -- setup such as
    AutoGen AgentChat 0.7's one-span ``create_agent`` trace -- and nothing in it failed or
    carries a ``steplog.*`` attribute. A trace of plain spans (an agent traced by hand) is a
    run, as it always was."""
    kind_of = tree.kind_of
    if any(kind_of(s) for s in tree.spans):
        return False
    semantic = False
    for span in tree.spans:
        attrs = span.attributes
        if span.failed or is_activity(span):
            return False
        if "gen_ai.operation.name" in attrs or "openinference.span.kind" in attrs:
            semantic = True
        if any(key.startswith("steplog.") for key in attrs):
            return False
    return semantic


def active_steps(tree: SpanTree, steps: list[Span]) -> list[Span]:
    """The steps of a run, by convention: the spans at the step level that hold agent, model or
    tool activity, or failed (a framework's bookkeeping spans -- LlamaIndex 0.14's workflow steps
    ``init_run``, ``setup_agent``, ``parse_agent_output``... -- are not steps). A run with no such
    span keeps every span at that level (a trace of plain spans)."""
    kind_of = tree.kind_of
    active = [step for step in steps if kind_of(step) or _holds_activity(tree, step)]
    return active or steps


def _holds_activity(tree: SpanTree, step: Span) -> bool:
    if step.failed:
        return True
    kind_of = tree.kind_of
    return any(kind_of(span) or is_activity(span) for span in tree.subtree(step))


__all__ = ["active_steps", "is_phantom"]
