"""Search across runs: inputs, outputs, errors, tool arguments and results, model calls.

The query and every filter live in the URL (a link reopens the same search); a click anywhere in
a result row opens the run on the Run detail page, in this tab.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import get_args

import pandas as pd
import streamlit as st

from steplog.projections.queries import metrics
from steplog.projections.run_types import RunStatus
from steplog.search import search
from steplog.ui.common import RUN, cached, empty_hint, go, guard, md, pickable

ALL = "(all)"
RUN_STATUSES = get_args(RunStatus)
LIMIT = 100


def _or_none(value: str | None) -> str | None:
    return None if value in (None, "", ALL) else value


def _moment(label: str, value: str) -> datetime | None:
    if not value.strip():
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        st.warning(md(f"{label} {value!r} is not a date or time (e.g. 2026-12-01); ignored."))
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def render() -> None:
    st.title("Search runs")
    groups = cached(metrics, by_task_type=False)
    if not groups:
        st.info(empty_hint())
        return
    query = st.text_input(
        'words and "quoted phrases" (all must match; word* is a prefix)', key="q",
        bind="query-params",
    )  # fmt: skip
    c1, c2, c3 = st.columns(3)
    version = c1.selectbox(
        "model version", [ALL, *sorted({m.model_version for m in groups})], key="version",
        bind="query-params",
    )  # fmt: skip
    scenario = c2.selectbox(
        "scenario", [ALL, *sorted({m.scenario for m in groups})], key="scenario",
        bind="query-params",
    )  # fmt: skip
    status = c3.selectbox("status", [ALL, *RUN_STATUSES], key="status", bind="query-params")
    c4, c5, c6 = st.columns(3)
    since = c4.text_input("started from (UTC)", key="since", bind="query-params")
    until = c5.text_input("started before (UTC)", key="until", bind="query-params")
    tags = c6.text_input("tags (key=value, comma separated)", key="tags", bind="query-params")
    if not query.strip():
        st.caption("Searches inputs, outputs, errors, tool arguments and results, model calls.")
        return
    hits = cached(
        search,
        query,
        version=_or_none(version),
        scenario=_or_none(scenario),
        status=_or_none(status),
        since=_moment("started from", since),
        until=_moment("started before", until),
        tags=tuple(t.strip() for t in tags.split(",") if t.strip()),
        limit=LIMIT,
    )
    if not hits:
        st.warning("No run matches this search and these filters.")
        return
    more = " (the newest; narrow the search for others)" if len(hits) == LIMIT else ""
    st.caption(f"{len(hits)} run(s), newest first{more}; click one to open it.")
    frame = pd.DataFrame(
        [
            {
                "run_id": hit.run_id,
                "started": hit.started_at.strftime("%Y-%m-%d %H:%M"),
                "version": hit.model_version,
                "scenario": hit.scenario,
                "status": hit.status,
                "where": hit.place,
                "matches": hit.matches,
                "snippet": hit.snippet,
            }
            for hit in hits
        ]
    )
    pickable(frame, "search_hits", lambda row: go(RUN, run=str(row["run_id"])))


guard(render)
