"""Run detail: what went wrong first, the trajectory, time travel, annotations, replays.

Page state lives in the URL (``?run=...&step=...&errors=...``): a link to this page shows the
same run at the same step with the same filters.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from steplog.attribution.readback import attribution_of, rescuers_of
from steplog.projections.queries import (
    regression_sets_of_run,
    related_runs,
    run_summary,
)
from steplog.projections.run_state import as_of, fold
from steplog.replay import parent_link
from steplog.ui import charts, side_by_side, trajectory_view, waterfall
from steplog.ui.annotate import editable, flash, label_form, reviewer, set_form, set_members
from steplog.ui.common import (
    LIBRARY,
    REPLAY,
    RUN,
    cached,
    go,
    guard,
    link,
    md,
    pickable,
    scroll_table_to,
    store,
    text,
    url_text,
)
from steplog.ui.trajectory import Trajectory, cut_at_step, step_seconds, trajectory

KINDS = ["model", "tool", "random", "clock"]


def _header(final, summary) -> None:  # type: ignore[no-untyped-def]
    st.markdown(
        md(
            f"{final.scenario} / {final.task_instance_id or '-'} on {final.model_version} "
            f"(seed {final.seed})"
        )
    )
    if final.status == "aborted":
        where = (
            f" at step {final.failure_step_index}" if final.failure_step_index is not None else ""
        )
        st.warning(md(f"aborted{where}: {final.failure_message or final.failure_type or ''}"))
    elif final.failure_type:
        st.error(md(f"failed at step {final.failure_step_index} ({final.failure_step})"))
        text(f"{final.failure_type}: {final.failure_message}")
    elif final.status == "completed":
        st.success("completed")
    else:
        st.info(md(final.status))
    if final.session_id:
        st.caption(md(f"session {final.session_id}"))
    if final.gaps:
        lines = "\n".join(f"- {md(gap)}" for gap in final.gaps)
        st.warning(f"Incomplete: the trace lost spans on the way.\n\n{lines}")
    if summary is not None and summary.signature:
        link(LIBRARY, "Failure signature in the library", sig=summary.signature)


def render() -> None:
    st.title("Run detail")
    run_id = url_text("run id", "run", placeholder="paste a run id")
    if not run_id:
        st.info("Enter a run id, or open one from the failure library.")
        return
    events = store().read_run(run_id)
    if not events:
        st.error(md(f"No run {run_id!r} in this store."))
        return
    final = fold(events)
    summary = cached(run_summary, run_id)
    _header(final, summary)
    side_by_side.parent_links(run_id, parent_link(final))
    last_step = max(len(final.steps) - 1, 0)
    at = last_step
    if last_step:
        at = st.slider("state as of step", 0, last_step, last_step, key="step", bind="query-params")
    state = as_of(events, step=at)
    found = trajectory(cut_at_step(events, at))
    _steps(state, found, final)
    st.caption(
        f"as of step {at}: run mode {state.run_mode}; retries {state.retries}; tokens "
        f"{state.input_tokens + state.output_tokens:,}; cost ${state.cost_usd:.4f}"
    )
    _waterfall(found)
    st.subheader("Trajectory")
    c1, c2, c3 = st.columns([1, 2, 1])
    errors_only = c1.toggle("errors only", key="errors", bind="query-params")
    kinds = c2.multiselect(
        "show calls", KINDS, default=["model", "tool"], key="calls", bind="query-params"
    )
    raw = c3.toggle("raw JSON", key="raw", bind="query-params")
    trajectory_view.render(found, kinds=set(kinds), errors_only=errors_only, raw=raw)
    _attribution(run_id, final)
    _annotations(run_id, final, summary)
    _related(run_id)
    link(REPLAY, "Replay or fork this run", run=run_id)


FATAL_ROW = "background-color: rgba(255, 43, 43, 0.22)"
RECOVERED_ROW = "background-color: rgba(255, 164, 33, 0.16)"


def _steps(state, found: Trajectory, final) -> None:  # type: ignore[no-untyped-def]
    """The step table: the fatal step red and scrolled into view, recovered steps orange,
    durations from the calls' times."""
    fatal = found.fatal_step.index if found.fatal_step else None
    seconds = {step.index: step_seconds(step) for step in found.steps}
    rows, colours = [], []
    for s in state.steps:
        recovered = s.index != fatal and (s.attempts > 1 or bool(s.last_error))
        status = (
            f"{found.fatal_step.status} (fatal)"
            if found.fatal_step and s.index == fatal
            else s.status
        )
        rows.append(
            {
                "#": s.index,
                "step": s.name,
                "status": status + (", recovered" if recovered else ""),
                "attempts": s.attempts,
                "last error": s.last_error or "",
                "tokens": s.input_tokens + s.output_tokens,
                "output": s.output_summary or "",
                "duration (s)": _rounded(seconds.get(s.index)),
            }
        )
        colours.append(FATAL_ROW if s.index == fatal else RECOVERED_ROW if recovered else "")
    frame = pd.DataFrame(rows)
    styled = frame.style.apply(lambda row: [colours[row.name]] * len(row), axis=1)
    with st.container(key="steps-table"):  # the key names it for scroll_table_to
        st.dataframe(
            styled,
            hide_index=True,
            width="stretch",
            height=min(36 + 35 * len(rows), 290),
            column_config={"last error": st.column_config.TextColumn(width="medium")},
        )
    if fatal is not None:
        position = next((i for i, s in enumerate(state.steps) if s.index == fatal), None)
        if position is not None:
            scroll_table_to("steps-table", position)


def _waterfall(found: Trajectory) -> None:
    """Steps, attempts and calls on a time axis; a click on a call shows its inputs and outputs."""
    rows = waterfall.spans(found)
    if not rows:
        return
    st.subheader("Waterfall")
    event = st.vega_lite_chart(
        pd.DataFrame(rows),
        waterfall.chart(len(rows)),
        width="stretch",
        height=waterfall.height(len(rows)),
        on_select="rerun",
        selection_mode="pick",
        key="waterfall",
    )
    picked = [p.get("id") for p in (event.selection.get("pick") or [])] if event else []
    row = next((r for r in rows if picked and r["id"] == picked[0]), None)
    if row is None:
        st.caption("Red: the failing path; orange: errors the run went on after. Click a bar.")
        return
    st.markdown(
        md(
            f"{row['label'].strip()}: {row['ms']:,.0f} ms, {row['tokens']:,} tokens, "
            f"${row['cost']:.4f}"
        )
    )
    if row["error"]:
        st.error(md(row["error"]))
    entry = next((e for e in _calls(found) if f"e{e.event.seq}" == row["id"]), None)
    if entry is not None:
        trajectory_view.render_call(entry)


def _calls(found: Trajectory):  # type: ignore[no-untyped-def]
    return (
        e for s in found.steps for a in s.attempts for e in a.entries if e.kind in waterfall.CALLS
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _related(run_id: str) -> None:
    """Replays, forks and reruns of this run: a click on a row opens it."""
    related = cached(related_runs, run_id)
    if not related:
        return
    st.subheader("Replays and forks")
    frame = pd.DataFrame(
        [
            {
                "mode": "replay" if r.replay_of else "fork" if r.forked_from else "rerun",
                "fork step": r.fork_step,
                "model version": r.model_version,
                "status": r.status,
                "failed step": r.failed_step,
                "run_id": r.run_id,
                "started": r.started_at,
            }
            for r in related
        ]
    )
    pickable(frame, "related", lambda row: go(RUN, run=str(row["run_id"])))
    side_by_side.child_links(run_id, related)


def _attribution(run_id: str, final) -> None:  # type: ignore[no-untyped-def]
    """The rescue curve of a recorded attribution (steplog attribute), read back: no forks."""
    if final.status not in ("failed", "aborted"):
        return
    rescuers = cached(rescuers_of, run_id)
    if not rescuers:
        return
    st.subheader("Which step was decisive?")
    rescuer = rescuers[0]
    if len(rescuers) > 1:
        rescuer = st.selectbox("rescuer", rescuers, key="rescuer", bind="query-params")
    recorded = cached(attribution_of, run_id, rescuer=rescuer)
    if recorded is None:
        return
    found = recorded.as_dict()
    text(found["summary"])
    frame = pd.DataFrame(
        [
            {
                "step": p["step"],
                "rate": p["rate"],
                "low": p["ci"][0],
                "high": p["ci"][1],
                "rescued": p["rescued"],
                "forks": p["forks"],
            }
            for p in found["curve"]
        ]
    )
    st.vega_lite_chart(
        frame,
        charts.rescue_curve_chart(found["decisive_step"], found["failure_step"]),
        width="stretch",
    )
    st.caption(
        md(
            f"rescue rate per fork step with its 95% Wilson interval, read back from the "
            f"{found['forks_spent']} recorded forks of session {found['session']}"
        )
    )


def _annotations(run_id: str, final, summary) -> None:  # type: ignore[no-untyped-def]
    """Labels and notes on this run and its signature: edit, remove, add, with their history."""
    if final.status not in ("failed", "aborted") or not summary or not summary.signature:
        return
    st.subheader("Annotations")
    flash()
    with st.columns([1, 2])[0]:
        who = reviewer("run_reviewer")
    signature = str(summary.signature)
    current = editable([("this run", run_id), ("its signature", f"signature:{signature}")], who)
    sets = cached(regression_sets_of_run, run_id)
    if sets:
        st.markdown(md("in regression sets: " + ", ".join(sets)))
        for name in sets:
            with st.expander(md(f"regression set {name}")):
                set_members(name)
    left, right = st.columns(2)
    with left:
        label_form(run_id, current, who)
    with right:
        set_form(run_id)


guard(render)
