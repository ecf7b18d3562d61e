"""Two runs side by side: their steps aligned, with what each step said and did differently.

For a replay, fork or rerun next to its parent, the relation comes first, coloured by the
child's outcome (a fork that still fails is red); then the first divergence in words, the aligned
steps, and the content diff with both texts side by side: the run's task and input, per
differing step its messages, tool arguments and results and outputs, then the run's outcome and
final output; the first difference expanded. The logic is core's
(:func:`steplog.replay.diff_runs`); the Side by side page and the replay page's results render it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd
import streamlit as st

from steplog.replay import diff_verdict, where
from steplog.ui.common import RUN, link, md

if TYPE_CHECKING:
    from steplog.read_models import RunSummary
    from steplog.replay import ParentLink, RunDiff

MARK_COLOURS = {
    "!": "background-color: rgba(255, 43, 43, 0.22)",
    "~": "background-color: rgba(255, 164, 33, 0.16)",
    "-": "background-color: rgba(128, 128, 128, 0.18)",
    "+": "background-color: rgba(28, 131, 225, 0.16)",
    "=": "",
}
SHOWN_STEPS = 30
"""Differing steps shown with their content (the first ones); the table lists all."""


def _cell(side: dict[str, Any] | None) -> str:
    if side is None:
        return "-"
    error = f" ({side['last_error_type']})" if side.get("last_error_type") else ""
    return f"{side['status']} x{side['attempts']}{error}"


def _index(value: int | None) -> int | None:
    return None if value is None else int(value)


def aligned(diff: dict[str, Any]) -> pd.DataFrame:
    """The aligned steps, one row per pair (or per step of only one run), with what differs."""
    return pd.DataFrame(
        [
            {
                "": row["mark"],
                "#A": _index(row["index_a"]),
                "step A": row["name_a"] or "",
                "A": _cell(row["a"]),
                "#B": _index(row["index_b"]),
                "step B": row["name_b"] or "",
                "B": _cell(row["b"]),
                "content differs in": where(row["content"], most=6),
            }
            for row in diff["steps"]
        ]
    )


def _relation(diff: dict[str, Any]) -> None:
    """How the runs are related (mode, step, version), coloured by the child's outcome."""
    rel = diff.get("relation")
    if not rel:
        return
    side = "B" if rel["child"] == diff["b"]["run_id"] else "A"
    step = f" at step {rel['step']}" if rel["step"] is not None else ""
    box = st.success if rel["good"] else st.error
    box(
        md(
            f"{side} is a {rel['mode']} of {rel['parent']}{step} on {rel['version']}: "
            f"{rel['outcome']}"
        )
    )


def _sides(diff: dict[str, Any]) -> None:
    """Each run: its status and version, a link to it, and to its own parent if it has one."""
    for column, name in zip(st.columns(2), "ab", strict=True):
        side = diff[name]
        with column:
            st.markdown(
                md(
                    f"{name.upper()}: {side['model_version']}, {side['status']}, retries "
                    f"{side['retries']}, tokens {side['tokens']:,}"
                )
            )
            link(RUN, f"Open run {side['run_id']}", run=side["run_id"])
            parent = side.get("parent")
            if parent:
                step = f" at step {parent['step']}" if parent["step"] is not None else ""
                link(
                    RUN,
                    f"its parent: {parent['mode']} of {parent['parent']}{step}",
                    run=parent["parent"],
                )


def _changes(title: str, changes: list[dict[str, Any]], expanded: bool) -> None:
    """One expander: each differing item with both texts side by side and a unified diff."""
    with st.expander(md(f"{title}: {len(changes)} difference(s)"), expanded=expanded):
        # verbatim as text, not st.code: the first code block on a page loads the syntax
        # highlighter in the browser (~0.6 s of a new tab's 2.9 s at 100k runs, bench ui)
        for change in changes:
            st.markdown(md(f"{change['what']}: {change['kind']}"))
            left, right = st.columns(2)
            left.text(change["a"] if change["a"] is not None else "(nothing)")
            right.text(change["b"] if change["b"] is not None else "(nothing)")
            if change["a"] is not None and change["b"] is not None and change["diff"]:
                st.text("\n".join(change["diff"]))


def _step_title(row: dict[str, Any]) -> str:
    where = " / ".join(
        f"{s.upper()} #{row[f'index_{s}']} {row[f'name_{s}']}"
        for s in "ab"
        if row[f"index_{s}"] is not None
    )
    return f"{row['mark']} {where}"


def sections(diff: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """What differs in content, in reading order: the run's task and input, the differing
    steps (the first :data:`SHOWN_STEPS`), the run's outcome and final output."""
    run = diff.get("run") or {}
    differing = [row for row in diff["steps"] if row["content"]]
    found = [("Run input", run.get("input") or [])]
    found += [(_step_title(row), row["content"]) for row in differing[:SHOWN_STEPS]]
    found.append(("Run outcome and final output", run.get("output") or []))
    return [(title, changes) for title, changes in found if changes]


def show(run_diff: RunDiff, key: str = "aligned") -> None:
    """The whole comparison of a :func:`~steplog.replay.diff_runs` result."""
    verdict = diff_verdict(run_diff)
    diff = run_diff.as_dict()  # the tables below lay out its JSON document
    _relation(diff)
    _sides(diff)
    (st.info if diff["identical"] or not diff["behaviour_differs"] else st.warning)(md(verdict))
    frame = aligned(diff)
    marks = [row["mark"] for row in diff["steps"]]
    styled = frame.style.apply(lambda row: [MARK_COLOURS[marks[row.name]]] * len(row), axis=1)
    counts = diff["counts"]
    st.caption(
        f"{counts['=']} same, {counts['~']} other content, {counts['!']} other status, "
        f"{counts['-']} only in A, {counts['+']} only in B"
    )
    st.dataframe(
        styled, hide_index=True, width="stretch", height=min(36 + 35 * len(frame), 420), key=key
    )
    for position, (title, changes) in enumerate(sections(diff)):
        _changes(title, changes, expanded=position == 0)
    differing = sum(1 for row in diff["steps"] if row["content"])
    if differing > SHOWN_STEPS:
        st.caption(
            f"{differing - SHOWN_STEPS} more differing step(s): "
            "`steplog diff A B --content` prints them all"
        )


def parent_links(run_id: str, parent: ParentLink | None) -> None:
    """On a run's page: its parent (mode, step, version) with links to it and to both side by
    side; and a way to compare the run with any other."""
    from steplog.ui.common import PAIR

    if parent:
        step = f" at step {parent.step}" if parent.step is not None else ""
        st.markdown(md(f"This run is a {parent.mode} of {parent.parent}{step} on {parent.version}"))
        c1, c2 = st.columns(2)
        with c1:
            link(RUN, "Open its parent", run=parent.parent)
        with c2:
            link(PAIR, "Compare with its parent", a=parent.parent, b=run_id)
    else:
        link(PAIR, "Compare with another run", a=run_id)


def child_links(run_id: str, related: list[RunSummary], most: int = 10) -> None:
    """On a parent's page: each replay, fork and rerun with its mode, step, version and
    outcome, as a link to both side by side (the first ``most``)."""
    from steplog.ui.common import PAIR

    for child in related[:most]:
        mode = "replay" if child.replay_of else "fork" if child.forked_from else "rerun"
        step = f" at step {child.fork_step}" if child.fork_step is not None else ""
        label = f"{mode}{step} on {child.model_version}: {child.status} (side by side)"
        link(PAIR, label, a=run_id, b=child.run_id)
    if len(related) > most:
        st.caption(f"{len(related) - most} more in the table above")
