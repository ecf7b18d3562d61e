"""Overview: runs and completion rates per scenario and version, newest failures, the store."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from steplog.projections.queries import list_runs, metrics
from steplog.stats.proportions import proportion
from steplog.ui import charts
from steplog.ui.common import (
    LIBRARY,
    RUN,
    cached,
    empty_hint,
    go,
    guard,
    pct,
    pickable,
    position,
    store_url,
)


def render() -> None:
    st.title("steplog")
    st.caption("Why do long-horizon agent runs fail?")
    last = position()
    rows = cached(metrics, by_task_type=False)
    left, middle, right = st.columns(3)
    left.metric("events", f"{last:,}")
    middle.metric("finished runs", f"{sum(m.runs for m in rows):,}")
    right.metric("store", store_url())
    if not rows:
        st.info(empty_hint())
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
    groups = frame.assign(
        group=frame["scenario"] + " · " + frame["model version"],
        version=frame["model version"],
        estimate=frame["completion"],
    )[["group", "version", "estimate", "low", "high"]]
    colour = charts.field("version", "nominal", legend={"orient": "top", "title": None})
    st.vega_lite_chart(
        groups,
        charts.interval_chart(
            "group", x_title="completion rate", percent=True, colour=colour, domain=[0, 1]
        ),
        width="stretch",
    )
    st.caption("Click a row to open its failures in the library.")
    pickable(
        frame.drop(columns=["low", "high"]),
        "groups",
        lambda row: go(LIBRARY, scenario=row["scenario"], version=row["model version"]),
        column_config={"completion": st.column_config.NumberColumn(format="percent")},
    )
    st.subheader("Newest failures")
    failed = cached(list_runs, status="failed", limit=10)
    if failed:
        st.caption("Click a row to open the run.")
        pickable(
            pd.DataFrame([r.model_dump() for r in failed])[
                ["run_id", "scenario", "model_version", "failed_step", "error_type", "ended_at"]
            ],
            "newest",
            lambda row: go(RUN, run=str(row["run_id"])),
        )


guard(render)
