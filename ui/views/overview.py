"""Overview: runs and completion rates per scenario and version, newest failures, the store."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from steplog.projections.queries import list_runs, metrics
from steplog.stats.proportions import proportion
from steplog.ui.common import EMPTY_HINT, cached, guard, pct, position, store


def render() -> None:
    st.title("steplog")
    st.caption("Why do long-horizon agent runs fail?")
    last = position()
    rows = cached(metrics, by_task_type=False)
    left, middle, right = st.columns(3)
    left.metric("events", f"{last:,}")
    middle.metric("finished runs", f"{sum(m.runs for m in rows):,}")
    right.metric("store", store().url)
    if not rows:
        st.info(EMPTY_HINT)
        return
    table = []
    for m in rows:
        ci = proportion(m.completed, m.runs)
        table.append(
            {
                "scenario": m.scenario,
                "model version": m.model_version,
                "runs": m.runs,
                "completion": m.completion_rate,
                "low": ci.low,
                "high": ci.high,
                "first step": pct(m.first_step_accuracy),
                "mid-run correction": pct(m.mid_run_correction_rate),
                "retries/run": round(m.mean_retries or 0, 2),
            }
        )
    frame = pd.DataFrame(table)
    st.subheader("Completion rate by scenario and model version (95% Wilson intervals)")
    base = alt.Chart(frame).encode(
        y=alt.Y("model version:N", title=None),
        color=alt.Color("model version:N", legend=None),
    )
    points = base.mark_point(filled=True, size=80).encode(
        x=alt.X("completion:Q", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%"))
    )
    bars = base.mark_rule().encode(x="low:Q", x2="high:Q")
    st.altair_chart((bars + points).facet(row=alt.Row("scenario:N", title=None)))
    st.dataframe(
        frame.drop(columns=["low", "high"]),
        hide_index=True,
        column_config={"completion": st.column_config.NumberColumn(format="percent")},
    )
    st.subheader("Newest failures")
    failed = cached(list_runs, status="failed", limit=10)
    if failed:
        st.dataframe(
            pd.DataFrame(failed)[
                ["run_id", "scenario", "model_version", "failed_step", "error_type", "ended_at"]
            ],
            hide_index=True,
        )


guard(render)
