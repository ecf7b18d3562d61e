"""The failure library: signatures with filters, search, sort and pages; their samples."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from steplog.projections.queries import STATUSES, get_failure, list_failures, list_runs, metrics
from steplog.ui.common import EMPTY_HINT, cached, guard, md, run_link

PAGE_SIZE = 25


def render() -> None:
    st.title("Failure library")
    groups = cached(metrics, by_task_type=False)
    if not groups:
        st.info(EMPTY_HINT)
        return
    scenarios = sorted({m.scenario for m in groups})
    versions = sorted({m.model_version for m in groups})
    c1, c2, c3, c4 = st.columns(4)
    scenario = c1.selectbox("scenario", ["(all)", *scenarios], key="scenario")
    version = c2.selectbox("model version", ["(all)", *versions], key="version")
    status = c3.selectbox("status", ["(all)", *STATUSES], key="status")
    sort = c4.selectbox("sort by", ["count", "last_seen", "first_seen"], key="sort")
    c5, c6, c7 = st.columns([2, 1, 1])
    search = c5.text_input("search message, step or error type", key="search")
    label = c6.text_input("label", key="label")
    page = c7.number_input("page", min_value=1, value=1, step=1, key="page")
    views = cached(
        list_failures,
        scenario=None if scenario == "(all)" else scenario,
        model_version=None if version == "(all)" else version,
        status=None if status == "(all)" else status,
        label=label.strip() or None,
        search=search.strip() or None,
        sort=sort,
        limit=PAGE_SIZE,
        offset=(int(page) - 1) * PAGE_SIZE,
    )
    if not views:
        st.warning("No failure signature matches these filters.")
        return
    frame = pd.DataFrame(
        [
            {
                "signature": v.signature,
                "scenario": v.scenario,
                "step": v.step,
                "error": v.error_type,
                "message": v.message,
                "runs": v.count,
                "by version": ", ".join(f"{k}: {n}" for k, n in v.counts_by_version.items()),
                "status": v.status,
                "labels": ", ".join(sorted({i["label"] for i in v.labels})),
                "last seen": v.last_seen_at,
            }
            for v in views
        ]
    )
    st.dataframe(frame, hide_index=True, key="signatures")
    chosen = st.selectbox("open a signature", [v.signature for v in views], key="chosen")
    view = get_failure_cached(chosen)
    st.subheader(md(f"{view.error_type} at {view.step} ({view.scenario})"))
    st.text(view.message)  # text, never HTML
    st.caption(
        f"{view.count} runs; first seen {view.first_seen_at:%Y-%m-%d %H:%M}, last seen "
        f"{view.last_seen_at:%Y-%m-%d %H:%M}; status {view.status}"
    )
    samples = cached(list_runs, signature=view.signature, limit=50)
    st.dataframe(
        pd.DataFrame(samples)[
            ["run_id", "model_version", "task_instance_id", "seed", "failed_step", "ended_at"]
        ],
        hide_index=True,
    )
    run_id = st.selectbox("open a sample", [s["run_id"] for s in samples], key="sample")
    st.markdown(run_link(run_id))


def get_failure_cached(signature: str):  # type: ignore[no-untyped-def]
    return cached(get_failure, signature)


guard(render)
