"""``steplog bench ui``: server-side render time of every page on a large store.

The store holds 100,000 runs (>= 1M events) replicated from real harness runs of every scenario
(cached under ``STEPLOG_HOME/bench``). Each page is rendered through Streamlit's ``AppTest`` with
the query caches cleared before every render, so the figure is a cold render: the queries,
the statistics and the charts, not a cache hit. Target: < 1.5 s per page (median).
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from ..database import steplog_home
from ..harness.batch import execute_all, plan_runs
from ..harness.scenario import registered_scenarios
from ..projections.queries import refresh
from ..store import EventStore

TARGET_SECONDS = 1.5
PAGES = ("overview", "failures", "run", "compare", "replay")
_COLUMNS = "position, event_id, run_id, seq, type, schema_version, recorded_at, payload"


@dataclass(frozen=True, slots=True)
class PageTiming:
    """Median cold render of one page."""

    page: str
    seconds: float
    runs: int

    @property
    def verdict(self) -> str:
        """Against the 1.5 s target."""
        return f"< {TARGET_SECONDS} s {'ok' if self.seconds < TARGET_SECONDS else 'MISSED'}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {**asdict(self), "verdict": self.verdict}


def build_store(path: Path, runs: int, progress: Console | None) -> int:
    """A store of ``runs`` runs copied from real ones; returns its event count."""
    if path.exists():
        with sqlite3.connect(path) as conn:
            have = conn.execute("SELECT count(DISTINCT run_id) FROM events").fetchone()[0]
            events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        if have >= runs:
            return int(events)
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    seed = path.with_name(path.stem + "-seed.db")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{seed}{suffix}").unlink(missing_ok=True)
    for spec in registered_scenarios().values():
        for version in spec.versions_for_demo():
            execute_all(
                str(seed),
                plan_runs(
                    spec,
                    model_version=version,
                    runs=25,
                    seed=1,
                    run_id_prefix=f"{spec.name}-{version}-",
                ),
            )
    with sqlite3.connect(seed) as source:
        template = source.execute(f"SELECT {_COLUMNS} FROM events ORDER BY position").fetchall()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{seed}{suffix}").unlink(missing_ok=True)
    per_copy = len({row[2] for row in template})
    copies = -(-runs // per_copy)
    EventStore.open(str(path)).close()
    target = sqlite3.connect(path, isolation_level=None)
    target.execute("PRAGMA journal_mode = WAL")
    target.execute("PRAGMA synchronous = NORMAL")  # bulk load only
    position = 0
    for copy in range(copies):
        if progress is not None and copy % 50 == 0:
            progress.print(f"building the UI benchmark store: copy {copy + 1}/{copies}")
        rows = []
        for _, _, run_id, seq, kind, version, recorded_at, payload in template:
            position += 1
            rows.append(
                (
                    position,
                    uuid.uuid4().hex,
                    f"{run_id}~{copy}",
                    seq,
                    kind,
                    version,
                    recorded_at,
                    payload,
                )
            )
        target.execute("BEGIN")
        target.executemany(f"INSERT INTO events ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        target.execute("COMMIT")
    target.close()
    store = EventStore.open(str(path))
    if progress is not None:
        progress.print("folding the read models ...")
    refresh(store)
    store.close()
    return position


def run_ui_benchmark(
    *, runs: int = 100_000, repeat: int = 3, progress: Console | None = None
) -> tuple[int, list[PageTiming]]:
    """(events in the store, median cold render per page)."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    path = steplog_home() / "bench" / f"ui-{runs}.db"
    events = build_store(path, runs, progress)
    os.environ["STEPLOG_DATABASE_URL"] = f"sqlite:///{path}"
    with sqlite3.connect(path) as conn:
        failed = conn.execute(
            "SELECT run_id FROM run_summaries WHERE status = 'failed' LIMIT 1"
        ).fetchone()[0]
    views = Path(__file__).resolve().parent.parent.parent / "ui" / "views"
    timings = []
    for page in PAGES:
        samples = []
        for _ in range(repeat):
            st.cache_data.clear()
            app = AppTest.from_file(str(views / f"{page}.py"), default_timeout=120)
            if page == "run":
                app.query_params["run"] = failed
            started = time.perf_counter()
            app.run()
            samples.append(time.perf_counter() - started)
            if app.exception:
                raise RuntimeError(f"page {page} failed: {app.exception}")
        timings.append(PageTiming(page, statistics.median(samples), runs))
        if progress is not None:
            progress.print(f"{page}: {timings[-1].seconds:.2f} s")
    return events, timings
