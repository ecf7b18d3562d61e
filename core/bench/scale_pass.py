"""One pass over a benchmark store, in a process of its own: the raw floor or the rebuild.

Used by :mod:`.scale` (``python -m steplog.bench.scale_pass KIND URL``): progress lines on
stderr, the result as one JSON line on stdout, so each pass's peak memory is its own. The clock
starts after the process has started (imports of the pass itself are timed).
"""

from __future__ import annotations

import json
import resource
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from pydantic_core import from_json

from ..store import EventStore, create_engine_for, redact, sqlite_path
from .stores import COLUMNS

PAGE_SIZE: Final = 5000


@dataclass(frozen=True, slots=True)
class PassResult:
    """One pass over the log, measured in its own process.

    ``cpu_seconds`` is that process's own CPU time (user + system): on a shared machine it moves
    far less than wall time. On PostgreSQL the server's share of the work is not in it.
    """

    events: int
    seconds: float
    cpu_seconds: float
    peak_rss_mb: float

    @property
    def events_per_second(self) -> float:
        """Throughput (wall clock)."""
        return self.events / self.seconds


def measure_pass(kind: str, url: str, update: Callable[[int, int], None]) -> PassResult:
    """Run the raw pass or the rebuild in its own process, following its progress."""
    child = subprocess.Popen(
        [sys.executable, "-m", "steplog.bench.scale_pass", kind, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    noise: list[str] = []
    for line in child.stderr:
        if line.startswith("progress "):
            done, total = (int(n) for n in line.split()[1:3])
            update(done, total)
        else:
            noise.append(line)
    out = child.stdout.read()
    if child.wait() != 0:
        raise RuntimeError(f"the {kind} pass over {redact(url)} failed:\n{''.join(noise)}")
    return PassResult(**json.loads(out.strip().splitlines()[-1]))


def _child(kind: str, url: str) -> dict[str, Any]:
    """One pass in this process (through ``python -m``): progress on stderr, result on stdout."""
    last = 0.0

    def report(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= 0.5 or done >= total:
            last = now
            print(f"progress {done} {total}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_at_start = usage.ru_utime + usage.ru_stime
    if kind == "raw":
        count = _raw_pass(url, report)
    else:
        from ..projections.library import LibraryProjection

        store = EventStore.open(url, auto_migrate=True)  # a schema this benchmark owns
        try:
            count = LibraryProjection(store).rebuild(progress=report)  # steplog rebuild's path
        finally:
            store.close()
    seconds = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "events": count,
        "seconds": seconds,
        "cpu_seconds": usage.ru_utime + usage.ru_stime - cpu_at_start,
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }


def _raw_pass(url: str, report: Callable[[int, int], None]) -> int:
    select_all = f"SELECT {COLUMNS} FROM events ORDER BY position"
    count = 0
    path = sqlite_path(url)
    if path is not None:
        conn = sqlite3.connect(path)
        try:
            total = int(conn.execute("SELECT max(position) FROM events").fetchone()[0] or 0)
            cursor = conn.execute(select_all)
            while rows := cursor.fetchmany(PAGE_SIZE):
                for row in rows:
                    from_json(row[7])
                count += len(rows)
                report(count, total)
        finally:
            conn.close()
        return count
    engine = create_engine_for(url)
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            total = int(cur.execute("SELECT max(position) FROM events").fetchone()[0] or 0)
        with pg.cursor(name="steplog_raw_pass") as cur:  # server-side; JSONB -> json.loads
            cur.itersize = PAGE_SIZE
            cur.execute(select_all)
            while rows := cur.fetchmany(PAGE_SIZE):
                count += len(rows)
                report(count, total)
        pg.rollback()
    finally:
        raw.close()
        engine.dispose()
    return count


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], sys.argv[2])))
