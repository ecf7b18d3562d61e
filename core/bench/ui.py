"""``steplog bench ui``: server-side render time of every page on a large store.

The store holds 100,000 runs (>= 1M events) replicated from real harness runs of every scenario
(cached under ``STEPLOG_HOME/bench``). Each page is rendered through Streamlit's ``AppTest`` with
the query caches cleared before every render, so the figure is a cold render: the queries,
the statistics and the charts, not a cache hit. Beside every page stands a trivial page (one
``st.title``) timed the same way in the same run: the target is a page at most 1.5 s slower
than it (in chromium when measured, else server-side), and a compare render <= 0.5 s.

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
import re
import sqlite3
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console

from ..projections.queries import refresh
from ..search import refresh_index
from ..store import EventStore, steplog_home
from .stores import ceil_div, replicated_store

TARGET_SECONDS = 1.5
"""A page may take this much longer than the trivial page (measured in the same run)."""
COMPARE_RENDER_SECONDS = 0.5
"""The compare page's cold server-side render."""
PAGES = ("overview", "failures", "modes", "queue", "search", "run", "pair", "compare", "replay")
TRIVIAL = "import streamlit as st\n\nst.title('trivial')\n"
"""The baseline: a one-line Streamlit page, timed in the same run, on the same machine."""


@dataclass(frozen=True, slots=True)
class PageTiming:
    """Median cold render of one page, and of the trivial page beside it."""

    page: str
    seconds: float
    runs: int
    browser_seconds: float | None = None  # chromium, until the page has settled
    baseline_seconds: float | None = None  # the trivial page's render, same run
    browser_baseline_seconds: float | None = None  # the trivial page in chromium, same run

    @property
    def over_trivial(self) -> float | None:
        """Seconds beyond the trivial page (in the browser when measured, else the render)."""
        if self.browser_seconds is not None and self.browser_baseline_seconds is not None:
            return self.browser_seconds - self.browser_baseline_seconds
        if self.browser_seconds is None and self.baseline_seconds is not None:
            return self.seconds - self.baseline_seconds
        return None

    @property
    def trivial_ratio(self) -> float | None:
        """The page's time over the trivial page's (browser when measured, else render)."""
        if self.browser_seconds is not None:
            base, measured = self.browser_baseline_seconds, self.browser_seconds
        else:
            base, measured = self.baseline_seconds, self.seconds
        return None if not base else measured / base

    @property
    def verdict(self) -> str:
        """Against the targets: <= 1.5 s over the trivial page (without a baseline: < 1.5 s),
        and for compare a server-side render <= 0.5 s."""
        over = self.over_trivial
        if over is None:
            measured = self.seconds if self.browser_seconds is None else self.browser_seconds
            text = f"< {TARGET_SECONDS} s {'ok' if measured < TARGET_SECONDS else 'MISSED'}"
        else:
            met = "ok" if over <= TARGET_SECONDS else "MISSED"
            text = f"<= {TARGET_SECONDS} s over trivial {met}"
        if self.page == "compare":
            fast = self.seconds <= COMPARE_RENDER_SECONDS
            text += f"; render <= {COMPARE_RENDER_SECONDS} s {'ok' if fast else 'MISSED'}"
        return text

    @property
    def browser_ratio(self) -> float | None:
        """Browser time over the server-side render: what the page costs beyond its script."""
        if self.browser_seconds is None or self.seconds <= 0:
            return None
        return self.browser_seconds / self.seconds

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            **asdict(self),
            "over_trivial": self.over_trivial,
            "trivial_ratio": self.trivial_ratio,
            "verdict": self.verdict,
            "browser_ratio": self.browser_ratio,
        }


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
        progress.print("folding the read models and the search index ...")
    refresh(store)
    refresh_index(store)
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
        failed, error_type = conn.execute(
            "SELECT run_id, error_type FROM run_summaries WHERE status = 'failed' LIMIT 1"
        ).fetchone()
        (other,) = conn.execute(
            "SELECT run_id FROM run_summaries WHERE run_id != ? LIMIT 1", (failed,)
        ).fetchone()
    query = " ".join(re.findall(r"[^\W_]+", str(error_type))[:2])  # words every failure has
    entry = Path(__file__).resolve().parent.parent.parent / "ui" / "app.py"
    baseline = _trivial_render(repeat)
    timings = []
    for page in PAGES:
        app = AppTest.from_file(str(entry), default_timeout=120)
        app.switch_page(f"views/{page}.py")  # in the multipage app, so links between pages resolve
        if page in ("run", "replay"):
            app.query_params["run"] = failed
        if page == "search":
            app.query_params["q"] = query
        if page == "pair":
            app.query_params["a"], app.query_params["b"] = failed, other
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
        timings.append(PageTiming(page, statistics.median(samples), runs, None, baseline))
        if progress is not None:
            progress.print(f"{page}: {timings[-1].seconds:.2f} s (trivial page {baseline:.2f} s)")
    if browser:
        from .ui_browser import browser_timings, trivial_browser_timing

        if progress is not None:
            progress.print("the same pages in chromium, and the trivial page ...")
        paths = {
            "overview": "/",
            "failures": "/failures",
            "modes": "/modes",
            "queue": "/queue",
            "search": f"/search?q={quote(query)}",
            "run": f"/run?run={failed}",
            "pair": f"/pair?a={failed}&b={other}",
            "compare": "/compare",
            "replay": f"/replay?run={failed}",
        }
        seconds = browser_timings(f"sqlite:///{path}", paths, repeat)
        trivial = trivial_browser_timing(TRIVIAL, repeat)
        timings = [
            replace(t, browser_seconds=seconds[t.page], browser_baseline_seconds=trivial)
            for t in timings
        ]
    return events, timings


def _trivial_render(repeat: int) -> float:
    """Median render of the trivial page through ``AppTest``, as the pages are timed."""
    from streamlit.testing.v1 import AppTest

    app = AppTest.from_string(TRIVIAL, default_timeout=60)
    app.run()  # untimed, as for the pages
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        app.run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)
