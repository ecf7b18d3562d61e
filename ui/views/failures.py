"""The failure library: signatures with filters, search, sort and pages; click one, then a sample.

Every filter, the page number and the open signature live in the URL, so a view can be shared
and the browser's back and forward buttons step through it. Clicking a row opens it in this
tab: a signature below the table, a sample on the Run detail page.
"""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from steplog.attribution.batch import recorded_histogram
from steplog.projections.queries import (
    STATUSES,
    FailureView,
    count_failures,
    get_failure,
    list_failures,
    list_runs,
    metrics,
)
from steplog.ui import charts
from steplog.ui.annotate import editable, flash, label_form, labels_table, reviewer, set_members
from steplog.ui.common import (
    RUN,
    cached,
    empty_hint,
    go,
    guard,
    md,
    param,
    pickable,
    set_param,
    text,
)

PAGE_SIZE = 25
ALL = "(all)"


def _or_none(value: str | None) -> str | None:
    return None if value in (None, "", ALL) else value


def render() -> None:
    st.title("Failure library")
    groups = cached(metrics, by_task_type=False)
    if not groups:
        st.info(empty_hint())
        return
    scenarios = sorted({m.scenario for m in groups})
    versions = sorted({m.model_version for m in groups})
    c1, c2, c3, c4 = st.columns(4)
    scenario = c1.selectbox("scenario", [ALL, *scenarios], key="scenario", bind="query-params")
    version = c2.selectbox("model version", [ALL, *versions], key="version", bind="query-params")
    status = c3.selectbox("status", [ALL, *STATUSES], key="status", bind="query-params")
    sort = c4.selectbox(
        "sort by", ["count", "last_seen", "first_seen"], key="sort", bind="query-params"
    )
    c5, c6 = st.columns([3, 1])
    search = c5.text_input("search message, step or error type", key="search", bind="query-params")
    label = c6.text_input("label", key="label", bind="query-params")
    filters = {
        "scenario": _or_none(scenario),
        "model_version": _or_none(version),
        "status": _or_none(status),
        "label": label.strip() or None,
        "search": search.strip() or None,
    }
    total = cached(count_failures, **filters)
    if not total:
        st.warning("No failure signature matches these filters.")
        _signature(param("sig"), _or_none(version))
        return
    pages = max(math.ceil(total / PAGE_SIZE), 1)
    c7, c8 = st.columns([1, 3])
    page = int(
        c7.number_input(
            f"page (of {pages})",
            min_value=1,
            max_value=pages,
            step=1,
            key="page",
            bind="query-params",
        )
    )
    first = (page - 1) * PAGE_SIZE
    c8.caption(
        f"{total:,} signatures match; showing {first + 1}-{min(first + PAGE_SIZE, total)}. "
        "Click a row to open it."
    )
    views = cached(list_failures, **filters, sort=sort, limit=PAGE_SIZE, offset=first)
    frame = pd.DataFrame(
        [
            {
                "signature": v.signature[:10],
                "runs": _count(v, _or_none(version)),
                "error": v.error_type,
                "step": v.step,
                "message": v.message,
                "by version": ", ".join(f"{k}: {n}" for k, n in v.counts_by_version.items()),
                "status": v.status,
                "labels": ", ".join(sorted({i["label"] for i in v.labels})),
                "scenario": v.scenario,
                "last seen": v.last_seen_at,
            }
            for v in views
        ]
    )
    full = {v.signature[:10]: v.signature for v in views}
    pickable(
        frame,
        "signatures",
        lambda row: set_param("sig", full[row["signature"]]),
        column_config={
            "signature": st.column_config.TextColumn(width="small"),
            "runs": st.column_config.NumberColumn(width="small"),
            "message": st.column_config.TextColumn(width="medium"),
            "last seen": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm"),
        },
    )
    _signature(param("sig"), _or_none(version))


def _count(view: FailureView, version: str | None) -> int:
    return view.counts_by_version.get(version, 0) if version else view.count


def _signature(signature: str | None, version: str | None) -> None:
    """The open signature: message, counts, labels, sets, and its samples (click to open)."""
    if not signature:
        return
    view = cached(get_failure, signature)
    st.divider()
    st.subheader(md(f"{view.error_type} at {view.step} ({view.scenario})"))
    text(view.message)
    counts = {version: _count(view, version)} if version else view.counts_by_version
    st.caption(
        md(
            f"signature {view.signature}; {_count(view, version)} runs"
            + (f" on {version}" if version else "")
            + f" ({', '.join(f'{k}: {n}' for k, n in counts.items())}); first seen "
            f"{view.first_seen_at:%Y-%m-%d %H:%M}, last seen {view.last_seen_at:%Y-%m-%d %H:%M}; "
            f"status {view.status}"
        )
    )
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Samples**" + (md(f" on {version}") if version else "") + " (click one)")
        samples = cached(list_runs, signature=view.signature, model_version=version, limit=50)
        if not samples:
            st.caption("No sample of this signature on this version.")
        else:
            frame = pd.DataFrame([s.model_dump() for s in samples])[
                ["run_id", "model_version", "task_instance_id", "seed", "failed_step", "ended_at"]
            ]
            pickable(frame, "samples", lambda row: go(RUN, run=str(row["run_id"])))
        _decisive_steps(view.signature)
    with right:
        st.markdown("**Labels**")
        labels_table(view.labels)
        _annotate(view)
        st.markdown("**Regression sets**")
        if not view.regression_sets:
            st.caption("In no regression set.")
        for name in view.regression_sets:
            with st.expander(md(name)):
                set_members(name)


def _annotate(view: FailureView) -> None:
    """Edit or remove the labels and notes on the signature and on its labelled runs (with
    their history), and label the signature or one of its runs."""
    st.markdown("**Edit, remove or add**")
    flash()
    who = reviewer("library_reviewer")
    runs = dict.fromkeys(str(i["run_id"]) for i in view.labels if i.get("run_id"))
    targets = [("the signature", f"signature:{view.signature}")]
    targets += [(f"run {run_id}", run_id) for run_id in runs]
    current = editable(targets, who)
    label_form(f"signature:{view.signature}", current, who, choose_target=True)


def _decisive_steps(signature: str) -> None:
    """Where the signature's attributed runs were decided, next to where they failed."""
    group = cached(recorded_histogram, signature)
    if group is None:
        st.caption("No run of this signature is attributed yet (steplog attribute --signature).")
        return
    st.markdown("**Decisive steps** (from recorded attributions)")
    rows = [
        {"step": row.step, "kind": kind, "runs": getattr(row, kind)}
        for row in group.steps
        for kind in ("decisive", "failure")
    ]
    st.vega_lite_chart(pd.DataFrame(rows), charts.decisive_histogram_chart(), width="stretch")
    st.caption(  # numbers only: nothing to make inert
        f"{group.runs} attributed run(s): {group.decisive} with a decisive step "
        f"({group.decided_before_failure} before the step that failed), "
        f"{group.plateau} plateau, {group.not_rescuable} not rescuable"
    )


guard(render)
