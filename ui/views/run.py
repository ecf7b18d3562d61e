"""Run detail: step timeline, calls, time travel, related replays; label, add to a set."""

from __future__ import annotations

import json
from urllib.parse import quote

import pandas as pd
import streamlit as st

from steplog.annotations import add_to_regression_set, label
from steplog.projections.queries import related_runs
from steplog.projections.run_state import as_of, fold
from steplog.ui.common import cached, guard, md, run_link, store

CALLS = ("ModelCalled", "ToolCalled", "RandomDrawn", "ClockRead")


def render() -> None:
    st.title("Run detail")
    run_id = st.text_input("run id", value=st.query_params.get("run", ""), key="run_id").strip()
    if not run_id:
        st.info("Enter a run id, or open one from the failure library.")
        return
    events = store().read_run(run_id)
    if not events:
        st.error(md(f"No run {run_id!r} in this store."))
        return
    final = fold(events)
    st.text(
        f"{final.scenario} / {final.task_instance_id} on {final.model_version} "
        f"(seed {final.seed}) -- {final.status}"
    )
    if final.session_id:
        st.caption(md(f"session {final.session_id}"))
    if final.gaps:
        lines = "\n".join(f"- {md(gap)}" for gap in final.gaps)
        st.warning(f"Incomplete: the trace lost spans on the way.\n\n{lines}")
    if final.failure_type:
        st.error(f"failed at step {final.failure_step_index}")
        st.code(
            f"{final.failure_type} at {final.failure_step}: {final.failure_message}", language=None
        )
    last_step = max(len(final.steps) - 1, 0)
    at = st.slider("state as of step", 0, last_step, last_step, key="at_step") if last_step else 0
    state = as_of(events, step=at)
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "#": s.index,
                    "step": s.name,
                    "status": s.status,
                    "attempts": s.attempts,
                    "last error": s.last_error or "",
                    "tokens": s.input_tokens + s.output_tokens,
                    "output": s.output_summary or "",
                    "duration (s)": (s.finished_at - s.started_at).total_seconds()
                    if s.finished_at and s.started_at
                    else None,
                }
                for s in state.steps
            ]
        ),
        hide_index=True,
    )
    st.caption(
        f"run mode {state.run_mode}; retries {state.retries}; tokens "
        f"{state.input_tokens + state.output_tokens:,}; cost ${state.cost_usd:.4f}"
    )
    with st.expander(f"{sum(e.type in CALLS for e in events)} recorded calls"):
        for event in events:
            if event.type in CALLS:
                st.markdown(
                    f"**{event.type}** step {event.payload.get('step_index')} "
                    f"call {event.payload.get('call_index')}"
                )
                st.code(json.dumps(event.payload, indent=1, default=str), language="json")
    related = cached(related_runs, run_id)
    if related:
        st.subheader("Replays and forks")
        for row in related:
            st.markdown(run_link(row["run_id"], f"{row['run_id']} ({row['status']})"))
    st.markdown(f"[Replay or fork this run](replay?run={quote(run_id, safe='')})")
    if final.status in ("failed", "aborted"):
        st.subheader("Label this failure")
        with st.form("label"):
            text = st.text_input("label", key="label_text")
            note = st.text_input("note", key="label_note")
            if st.form_submit_button("Save label"):
                signature = label(store(), run_id, label=text, note=note or None, by="ui")
                st.success(md(f"labelled {signature} {text!r}"))
        with st.form("regression"):
            name = st.text_input("regression set", key="set_name")
            if st.form_submit_button("Add to regression set"):
                add_to_regression_set(store(), name, [run_id])
                st.success(md(f"added to {name!r}"))


guard(render)
