"""Side by side: any two runs (``?a=RUN&b=RUN``), a replay or fork beside its parent.

What is shown is :mod:`steplog.ui.side_by_side`'s; opened from a run's page (compare with its
parent, or with a run of your choice) and from the replay page's results.
"""

from __future__ import annotations

import streamlit as st

from steplog.projections.run_state import fold
from steplog.replay import diff_runs, parent_link
from steplog.ui import side_by_side
from steplog.ui.common import PAIR, cached, guard, link, md, store, url_text


def render() -> None:
    st.title("Side by side")
    left, right = st.columns(2)
    with left:
        run_a = url_text("run A", "a", placeholder="paste a run id")
    with right:
        run_b = url_text("run B", "b", placeholder="paste another run id")
    if not run_a or not run_b:
        st.info(
            "Enter two run ids (any two runs; a replay or fork with its parent shows how it "
            "turned out), or open this page from a run's page."
        )
        if run_a and not run_b:
            _suggest(run_a)
        return
    side_by_side.show(cached(diff_runs, run_a, run_b))


def _suggest(run_id: str) -> None:
    """Run A alone: offer its parent, when it has one."""
    events = store().read_run(run_id)
    if not events:
        st.error(md(f"No run {run_id!r} in this store."))
        return
    parent = parent_link(fold(events))
    if parent:
        link(PAIR, f"Compare with its parent {parent.parent}", a=parent.parent, b=run_id)


guard(render)
