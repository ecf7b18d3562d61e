"""``steplog bench ui``: server-side render time of every page on a large store.

The store holds 100,000 runs (>= 1M events) replicated from real harness runs of every scenario
(cached under ``STEPLOG_HOME/bench``). Each page is rendered through Streamlit's ``AppTest`` with
the query caches cleared before every render, so the figure is a cold render: the queries,
the statistics and the charts, not a cache hit. Target: < 1.5 s per page (median).

What is timed is the page's script run. On the replay page it is a real replay view: the
"Replay" button is clicked, so the run is replayed exactly (a new run is stored), diffed against
the original and the aligned diff rendered -- not the idle form; a sample that shows no replay
result stops the benchmark. Queries are cold (caches cleared); the process and the page's
modules are warm. Each page's ``AppTest`` is set up and run once untimed
first: a fresh ``AppTest`` discovers Streamlit's installed components and the first run imports
the page's modules (together about half a second on this machine), which a running server
does once at start, not on every render.

With ``--browser`` each page is also opened in chromium against a running ``steplog ui``
(:mod:`.ui_browser`): the time until the page has settled, which is what a user waits for.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from ..projections.queries import refresh
from ..store import EventStore, steplog_home
from .stores import ceil_div, replicated_store

TARGET_SECONDS = 1.5
PAGES = ("overview", "failures", "run", "compare", "replay")


@dataclass(frozen=True, slots=True)
class PageTiming:
    """Median cold render of one page."""

    page: str
    seconds: float
    runs: int
    browser_seconds: float | None = None  # chromium, until the page has settled

    @property
    def verdict(self) -> str:
        """Against the 1.5 s target (the browser's time when measured, else the render's)."""
        measured = self.seconds if self.browser_seconds is None else self.browser_seconds
        return f"< {TARGET_SECONDS} s {'ok' if measured < TARGET_SECONDS else 'MISSED'}"

    @property
    def browser_ratio(self) -> float | None:
        """Browser time over the server-side render: what the page costs beyond its script."""
        if self.browser_seconds is None or self.seconds <= 0:
            return None
        return self.browser_seconds / self.seconds

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {**asdict(self), "verdict": self.verdict, "browser_ratio": self.browser_ratio}


def build_store(path: Path, runs: int, progress: Console | None) -> int:
    """A store of ``runs`` runs copied from real ones, read models folded; its event count."""
    _, events = replicated_store(
        path,
        enough=lambda have, _events: have >= runs,
        copies=lambda per_copy, _events: ceil_div(runs, per_copy),
        progress=progress,
    )
    store = EventStore.open(str(path))
    if progress is not None:
        progress.print("folding the read models ...")
    refresh(store)
    store.close()
    return events


def run_ui_benchmark(
    *,
    runs: int = 100_000,
    repeat: int = 3,
    progress: Console | None = None,
    browser: bool = False,
) -> tuple[int, list[PageTiming]]:
    """(events in the store, median cold render per page; with ``browser``, chromium's time
    until each page has settled as well)."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    path = steplog_home() / "bench" / f"ui-{runs}.db"
    events = build_store(path, runs, progress)
    os.environ["STEPLOG_DATABASE_URL"] = f"sqlite:///{path}"
    # The replay page is timed with a replay on it: the benchmark's own scratch store allows them.
    os.environ["STEPLOG_UI_ALLOW_REPLAYS"] = "1"
    with sqlite3.connect(path) as conn:
        failed = conn.execute(
            "SELECT run_id FROM run_summaries WHERE status = 'failed' LIMIT 1"
        ).fetchone()[0]
    entry = Path(__file__).resolve().parent.parent.parent / "ui" / "app.py"
    timings = []
    for page in PAGES:
        app = AppTest.from_file(str(entry), default_timeout=120)
        app.switch_page(f"views/{page}.py")  # in the multipage app, so links between pages resolve
        if page in ("run", "replay"):
            app.query_params["run"] = failed
        app.run()  # untimed: the harness's one-off setup and the page's imports
        samples = []
        for _ in range(repeat):
            if app.exception:
                raise RuntimeError(f"page {page} failed: {app.exception}")
            st.cache_data.clear()
            if page == "replay":
                app.session_state["replays"] = []  # one result on the page, the one timed
                app.button(key="go").click()
            started = time.perf_counter()
            app.run()
            samples.append(time.perf_counter() - started)
            if page == "replay" and len(app.session_state["replays"]) != 1:
                raise RuntimeError("the replay page showed no replay: nothing was timed")
        if app.exception:
            raise RuntimeError(f"page {page} failed: {app.exception}")
        timings.append(PageTiming(page, statistics.median(samples), runs))
        if progress is not None:
            progress.print(f"{page}: {timings[-1].seconds:.2f} s")
    if browser:
        from .ui_browser import browser_timings

        if progress is not None:
            progress.print("the same pages in chromium ...")
        paths = {
            "overview": "/",
            "failures": "/failures",
            "run": f"/run?run={failed}",
            "compare": "/compare",
            "replay": f"/replay?run={failed}",
        }
        seconds = browser_timings(f"sqlite:///{path}", paths, repeat)
        timings = [replace(t, browser_seconds=seconds[t.page]) for t in timings]
    return events, timings
