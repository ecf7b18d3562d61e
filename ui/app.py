"""steplog's Streamlit app: ``steplog ui`` starts it. Multipage via ``st.navigation``."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

PAGES = Path(__file__).parent / "views"

st.set_page_config(page_title="steplog", page_icon=":mag:", layout="wide")
navigation = st.navigation(  # on top: the whole width for tables, 800 px windows included
    [
        st.Page(PAGES / "overview.py", title="Overview", default=True),
        st.Page(PAGES / "failures.py", title="Failure library"),
        st.Page(PAGES / "modes.py", title="Failure modes", url_path="modes"),
        st.Page(PAGES / "queue.py", title="Annotation queue", url_path="queue"),
        st.Page(PAGES / "search.py", title="Search", url_path="search"),
        st.Page(PAGES / "run.py", title="Run detail", url_path="run"),
        st.Page(PAGES / "compare.py", title="Compare versions"),
        st.Page(PAGES / "replay.py", title="Replay", url_path="replay"),
        st.Page(PAGES / "pair.py", title="Side by side", url_path="pair"),
    ],
    position="top",
)
navigation.run()
