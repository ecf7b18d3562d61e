"""A diff of two runs (:func:`~._diff.diff_runs`) said in one sentence: identical, the same
behaviour, or where they first diverge and how (what `steplog diff` and the UI both print)."""

from __future__ import annotations

from typing import Any


def diff_verdict(result: dict[str, Any]) -> str:
    """The first behavioural divergence in words (or that there is none)."""
    first = result["first_difference"]
    if result["identical"]:
        return "identical event streams"
    if first is None:
        step = result.get("first_differing_step")
        if step is not None and step["mark"] in "!-+":
            index = step["index_a"] if step["index_a"] is not None else step["index_b"]
            return f"first difference at step {index} {step['name']}: {step['kind']}"
        return "same behaviour (they differ only in clock, model identity or tokens)"
    if first["step_index"] is None and first.get("first_step"):
        step = first["first_step"]
        index = step["index_a"] if step["index_a"] is not None else step["index_b"]
        header = ", ".join(first["fields"]) or _kinds(first)
        return (
            f"first behavioural divergence at step {index} {step['name']}: {step['kind']} "
            f"(the run's header differs too: {header})"
        )
    where = "the run" if first["step_index"] is None else f"step {first['step_index']}"
    names = ""
    if first.get("step_a") or first.get("step_b"):
        names = f" (A: {first.get('step_a') or '-'}, B: {first.get('step_b') or '-'})"
    call = "" if first["call_index"] is None else f", call {first['call_index']}"
    what = ", ".join(first["fields"]) or _kinds(first)
    return f"first behavioural divergence at {where}{names}{call}: {what}"


def _kinds(first: dict[str, Any]) -> str:
    one, two = first.get("a"), first.get("b")
    left = one["type"] if one else "nothing"
    right = two["type"] if two else "nothing"
    return f"A has {left}, B has {right}"
