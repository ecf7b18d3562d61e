"""Replay console: exact replay or fork at step K; verdict, diff, link; regression sets."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from steplog.projections.queries import metrics, regression_sets
from steplog.replay import diff_runs, regress, replay
from steplog.ui.common import cached, guard, md, run_link, store


def render() -> None:
    st.title("Replay")
    run_id = st.text_input("run id", value=st.query_params.get("run", ""), key="run_id").strip()
    mode = st.radio("mode", ["exact replay", "fork at step"], horizontal=True, key="mode")
    step = None
    version = None
    if mode == "fork at step":
        c1, c2 = st.columns(2)
        step = int(c1.number_input("fork at step", min_value=0, value=0, step=1, key="step"))
        versions = sorted({m.model_version for m in cached(metrics, by_task_type=False)})
        version = c2.selectbox("continue on model version", versions, key="version")
    if st.button("Replay", disabled=not run_id, key="go"):
        with st.status("replaying ...", expanded=False) as status:
            result = replay(store(), run_id, fork_at_step=step, model_version=version)
            status.update(label="done", state="complete")
        if result.divergence is not None or result.identical is False:
            st.error(md(result.summary))
        else:
            st.success(md(result.summary))
        st.markdown(run_link(result.run_id, f"new run {result.run_id}"))
        diff = diff_runs(store(), run_id, result.run_id)
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "#": r["index"],
                        "step": r["name"],
                        "original": "-"
                        if r["a"] is None
                        else f"{r['a']['status']} x{r['a']['attempts']}",
                        "replay": "-"
                        if r["b"] is None
                        else f"{r['b']['status']} x{r['b']['attempts']}",
                        "same": r["same"],
                    }
                    for r in diff["steps"]
                ]
            ),
            hide_index=True,
        )
    st.divider()
    st.subheader("Regression sets")
    sets = cached(regression_sets)
    if not sets:
        st.caption("No regression set yet: add failed runs from a run's page.")
        return
    c1, c2, c3 = st.columns(3)
    name = c1.selectbox("set", list(sets), key="set")
    target = c2.text_input("model version", key="target")
    how = c3.selectbox("how", ["fork", "rerun"], key="how")
    if st.button("Replay the set", disabled=not target, key="regress"):
        outcome = regress(store(), name, model_version=target, mode=how)  # type: ignore[arg-type]
        st.success(md(outcome["verdict"]))
        st.dataframe(pd.DataFrame(outcome["results"]), hide_index=True)


guard(render)
