"""Replay console: exact replay or fork at step K; verdict, content diff, links; regression sets.

The form starts from the run in the URL: a fork defaults to the step the run failed at and to
another model version. Results stay in the session (newest first) until the page is left.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd
import streamlit as st

from steplog.errors import SteplogError
from steplog.projections.queries import metrics, regression_sets, run_summary
from steplog.regress import regress
from steplog.replay import diff_runs, replay
from steplog.ui import side_by_side
from steplog.ui.annotate import set_members
from steplog.ui.common import PAIR, RUN, cached, go, guard, link, md, pickable, store, url_text

MODES = ["exact replay", "fork at step"]
READ_ONLY_NOTE = (
    "This UI is read-only: replays and forks run agent code and write runs. Start it with "
    "`steplog ui --allow-replays` to allow them, or replay from the shell with `steplog replay`."
)


def replays_allowed() -> bool:
    """Whether ``steplog ui`` was started with ``--allow-replays``."""
    return os.environ.get("STEPLOG_UI_ALLOW_REPLAYS") == "1"


def _show(result: dict[str, Any], position: int) -> None:
    """One replay's verdict (red unless good news: a fork that still fails is red), links to
    the new run and to both side by side, and the aligned content diff."""
    box = st.success if result["good"] else st.error
    box(md(result["summary"]))
    c1, c2 = st.columns(2)
    with c1:
        link(RUN, f"Open the new run {result['run_id']}", run=result["run_id"])
    with c2:
        link(PAIR, "Side by side with the original", a=result["original"], b=result["run_id"])
    side_by_side.show(result["diff"], key=f"diff-{position}")


def _defaults(run_id: str) -> tuple[int, list[str], int]:
    """(fork step, versions, index of the other version) for ``run_id``."""
    summary = cached(run_summary, run_id) if run_id else None
    versions = sorted({m.model_version for m in cached(metrics, by_task_type=False)})
    step = 0
    other = 0
    if summary is not None:
        if summary.failed_step_index is not None:
            step = int(summary.failed_step_index)
        same_scenario = sorted(
            {
                m.model_version
                for m in cached(metrics, by_task_type=False)
                if m.scenario == summary.scenario
            }
        )
        others = [v for v in same_scenario if v != summary.model_version] or [
            v for v in versions if v != summary.model_version
        ]
        if others and others[0] in versions:
            other = versions.index(others[0])
    return step, versions, other


def render() -> None:
    st.title("Replay")
    run_id = url_text("run id", "run", placeholder="paste a run id")
    mode = st.radio("mode", MODES, horizontal=True, key="mode", bind="query-params")
    step = None
    version = None
    if mode == MODES[1]:
        default_step, versions, other = _defaults(run_id)
        c1, c2 = st.columns(2)
        step = int(
            c1.number_input(
                "fork at step (the step the run failed at)",
                min_value=0,
                value=default_step,
                step=1,
                key=f"step-{run_id}",
            )
        )
        version = c2.selectbox(
            "continue on model version", versions, index=other, key=f"version-{run_id}"
        )
    results: list[dict[str, Any]] = st.session_state.setdefault("replays", [])
    allowed = replays_allowed()
    if not allowed:
        st.info(READ_ONLY_NOTE)
    if st.button("Replay", disabled=not run_id or not allowed, key="go", type="primary"):
        with st.status("replaying ...", expanded=False) as status:
            try:
                result = replay(store(), run_id, fork_at_step=step, model_version=version)
            except SteplogError as exc:
                status.update(label="failed", state="error")
                st.error(md(exc))
                result = None
            else:
                status.update(label="done", state="complete")
        if result is not None:
            results.insert(
                0,
                {
                    "summary": result.summary,
                    "good": result.good,
                    "run_id": result.run_id,
                    "original": run_id,
                    "diff": diff_runs(store(), run_id, result.run_id),
                },
            )
    for position, shown in enumerate(results):
        if position == 0:
            _show(shown, position)
        else:
            with st.expander(md(f"earlier: {shown['original']} -> {shown['summary']}")):
                _show(shown, position)
    st.divider()
    _regression_sets()


def _regression_sets() -> None:
    st.subheader("Regression sets")
    sets = {s.name: s.runs for s in cached(regression_sets)}
    if not sets:
        st.caption("No regression set yet: add failed runs from a run's page.")
        return
    c1, c2, c3 = st.columns(3)
    name = c1.selectbox("set", list(sets), key="set", bind="query-params")
    versions = sorted({m.model_version for m in cached(metrics, by_task_type=False)})
    target = c2.selectbox("model version", versions, key="target")
    how = c3.selectbox("how", ["fork", "rerun"], key="how")
    with st.expander(md(f"members of {name} ({sets.get(name, 0)})")):
        set_members(name)
    allowed = replays_allowed()
    if st.button("Replay the set", disabled=not target or not allowed, key="regress"):
        try:
            done = regress(store(), name, model_version=target, mode=how)  # type: ignore[arg-type]
        except SteplogError as exc:
            st.error(md(exc))
        else:
            st.session_state["regression"] = done
    outcome: dict[str, Any] | None = st.session_state.get("regression")
    if outcome:
        st.success(md(outcome["verdict"]))
        frame = pd.DataFrame(
            [
                {
                    "run_id": r["run_id"],
                    "original": r["original"],
                    "candidate": r["status"],
                    "control": r["control"]["status"],
                    "fork_step": r["fork_step"],
                    "why there": r["fork_reason"],
                }
                for r in outcome["results"]
            ]
        )
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "failure": g["failure"],
                        "samples": g["samples"],
                        "fixed": g["fixed"],
                        "fix rate": g["fix_rate"]["estimate"],
                        "95% low": g["fix_rate"]["ci"][0],
                        "95% high": g["fix_rate"]["ci"][1],
                        "control passes": g["control_pass"],
                    }
                    for g in outcome["by_signature"]
                ]
            ),
            hide_index=True,
        )
        st.caption("Click a row to open the new run.")
        pickable(frame, "regression-results", lambda row: go(RUN, run=str(row["run_id"])))


guard(render)
