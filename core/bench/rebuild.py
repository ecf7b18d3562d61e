"""``steplog bench rebuild``: rebuilding the library from a large log, against a raw pass.

The store is made of real harness runs (every scenario, both demo versions), replicated under
new run and event ids until it holds the requested number of events; it is cached under
``STEPLOG_HOME/bench`` so repeated runs measure rather than regenerate. Each measurement runs in
its own process, so its peak resident memory is its own:

* ``raw``: sqlite3 reads every row in position order (``fetchmany``) and decodes each payload
  with pydantic-core's ``from_json`` -- the decoder steplog's readers use -- counting the rows
  it read: the floor of any pass over the log;
* ``rebuild``: ``steplog rebuild``'s code path: fold everything into shadow tables, swap.

Both passes run in fresh processes (the clock starts after start-up; what a pass imports later
is timed) on a file the build or the previous pass has just read (warm page cache). Each must
count every event of the store, or the benchmark stops. Each pass also reports its own CPU time
(``--json``: ``cpu_ratio``), which a shared host disturbs far less than wall time.

Targets: rebuild >= 0.6x the raw pass's events/s, and < 300 MB peak RSS (streaming).
"""

from __future__ import annotations

import json
import resource
import sqlite3
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from ..store import EventStore, steplog_home
from .stores import COLUMNS, ceil_div, replicated_store

SPEED_TARGET = 0.6
MEMORY_TARGET_MB = 300


@dataclass(frozen=True, slots=True)
class PassResult:
    """One pass over the log, measured in its own process."""

    events: int
    seconds: float
    peak_rss_mb: float
    cpu_seconds: float = 0.0
    """The pass's own CPU time (user + system): moves far less than wall time on a shared host."""

    @property
    def events_per_second(self) -> float:
        """Throughput."""
        return self.events / self.seconds


@dataclass(frozen=True, slots=True)
class RebuildBench:
    """The raw pass and the rebuild over the same store."""

    events: int
    runs: int
    raw: PassResult
    rebuild: PassResult

    @property
    def ratio(self) -> float:
        """Rebuild events/s over raw events/s."""
        return self.rebuild.events_per_second / self.raw.events_per_second

    @property
    def cpu_ratio(self) -> float | None:
        """The same ratio in CPU time (``None`` when a pass has no CPU time)."""
        if not self.raw.cpu_seconds or not self.rebuild.cpu_seconds:
            return None
        return (self.raw.cpu_seconds / self.raw.events) / (
            self.rebuild.cpu_seconds / self.rebuild.events
        )

    @property
    def verdicts(self) -> dict[str, str]:
        """Speed and memory against their targets."""
        return {
            "speed": f">= {SPEED_TARGET}x {'ok' if self.ratio >= SPEED_TARGET else 'MISSED'}",
            "memory": f"< {MEMORY_TARGET_MB} MB "
            + ("ok" if self.rebuild.peak_rss_mb < MEMORY_TARGET_MB else "MISSED"),
        }

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "events": self.events,
            "runs": self.runs,
            "raw": {**asdict(self.raw), "events_per_second": self.raw.events_per_second},
            "rebuild": {
                **asdict(self.rebuild),
                "events_per_second": self.rebuild.events_per_second,
            },
            "ratio": self.ratio,
            "cpu_ratio": self.cpu_ratio,
            "verdicts": self.verdicts,
        }


def build_store(path: Path, events: int, progress: Console | None = None) -> int:
    """A SQLite store of at least ``events`` events of real runs; returns its run count."""
    runs, _ = replicated_store(
        path,
        enough=lambda _runs, have: have >= events,
        copies=lambda _runs, per_copy: ceil_div(events, per_copy),
        progress=progress,
    )
    return runs


def _child(kind: str, path: str) -> dict[str, Any]:
    """Run one pass in this process and report it (used through ``python -m``)."""
    started = time.perf_counter()
    cpu_started = time.process_time()
    if kind == "raw":
        from pydantic_core import from_json

        conn = sqlite3.connect(path)
        cursor = conn.execute(f"SELECT {COLUMNS} FROM events ORDER BY position")
        count = 0
        while rows := cursor.fetchmany(5000):
            for row in rows:
                from_json(row[7])
            count += len(rows)
        conn.close()
    else:
        from ..projections.library import LibraryProjection

        store = EventStore.open(path)
        count = LibraryProjection(store).rebuild()
        store.close()
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "events": count,
        "seconds": seconds,
        "peak_rss_mb": peak_kb / 1024,
        "cpu_seconds": cpu_seconds,
    }


def _stored_events(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def _measure(kind: str, path: Path) -> PassResult:
    result = subprocess.run(
        [sys.executable, "-m", "steplog.bench.rebuild", kind, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the {kind} pass failed:\n{result.stderr}")
    return PassResult(**json.loads(result.stdout.strip().splitlines()[-1]))


def run_rebuild_benchmark(
    *, events: int = 1_000_000, repeat: int = 1, progress: Console | None = None
) -> RebuildBench:
    """Build (or reuse) the store, then measure both passes ``repeat`` times (best kept)."""
    path = steplog_home() / "bench" / f"rebuild-{events}.db"
    runs = build_store(path, events, progress)
    raw: list[PassResult] = []
    rebuilt: list[PassResult] = []
    for attempt in range(repeat):
        if progress is not None:
            progress.print(f"round {attempt + 1}/{repeat}: raw pass, then rebuild ...")
        raw.append(_measure("raw", path))
        rebuilt.append(_measure("rebuild", path))
    stored = _stored_events(path)
    for result in (*raw, *rebuilt):
        if result.events != stored:
            raise RuntimeError(f"a pass saw {result.events:,} of the {stored:,} stored events")
    best_raw = min(raw, key=lambda r: r.seconds)
    best_rebuild = min(rebuilt, key=lambda r: r.seconds)
    return RebuildBench(best_raw.events, runs, best_raw, best_rebuild)  # best wall (and its CPU)


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], sys.argv[2])))
