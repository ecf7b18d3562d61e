"""A diff of two runs (:func:`~._diff.diff_runs`) said in one sentence: identical, the same
behaviour, or where they first diverge and how (what `steplog diff` and the UI both print)."""

from __future__ import annotations

from ._models import FirstDifference, RunDiff, StepRef


def diff_verdict(result: RunDiff) -> str:
    """The first behavioural divergence in words (or that there is none)."""
    first = result.first_difference
    if result.identical:
        return "identical event streams"
    if first is None:
        step = result.first_differing_step
        if step is not None and step.mark in "!-+":
            return f"first difference at step {_index(step)} {step.name}: {step.kind}"
        return "same behaviour (they differ only in clock, model identity or tokens)"
    if first.step_index is None and first.first_step:
        step = first.first_step
        header = ", ".join(first.fields) or _kinds(first)
        return (
            f"first behavioural divergence at step {_index(step)} {step.name}: {step.kind} "
            f"(the run's header differs too: {header})"
        )
    where = "the run" if first.step_index is None else f"step {first.step_index}"
    names = ""
    if first.step_a or first.step_b:
        names = f" (A: {first.step_a or '-'}, B: {first.step_b or '-'})"
    call = "" if first.call_index is None else f", call {first.call_index}"
    what = ", ".join(first.fields) or _kinds(first)
    return f"first behavioural divergence at {where}{names}{call}: {what}"


def _index(step: StepRef) -> int | None:
    return step.index_a if step.index_a is not None else step.index_b


def _kinds(first: FirstDifference) -> str:
    left = first.a["type"] if first.a else "nothing"
    right = first.b["type"] if first.b else "nothing"
    return f"A has {left}, B has {right}"
