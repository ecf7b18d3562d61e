"""``steplog bench record --recorders N``: N harness recorders at once, against the same work
with durability taken away.

N threads of one process each run the scenario's harness (zero-latency simulated model) into
one store, every step a durable commit, so appends meet commits in flight and share them
(group commit, :mod:`steplog.store._group`). The baseline is the identical work where a durable
commit costs next to nothing: on SQLite the database on a RAM disk (``/dev/shm``), on
PostgreSQL ``synchronous_commit = off`` for the benchmark's connections. The ratio (events/s
durable over events/s not) is what durability costs N recorders; target >= 0.9x (issue 38).
Each side runs on a fresh store (a SQLite file, or a PostgreSQL schema of its own), sides
interleaved, median of the repeats; both stores must hold every event recorded.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..harness.batch import plan_runs
from ..harness.runner import launch
from ..harness.scenario import get_scenario
from ..store import EventStore

TARGET = 0.9
RAM_DISK = Path("/dev/shm")


@dataclass(frozen=True, slots=True)
class RecordersBench:
    """Events/s of N recorders, durable and not, on one engine."""

    engine: str
    recorders: int
    runs: int
    events: int
    durable_events_per_second: float
    baseline_events_per_second: float
    baseline: str

    @property
    def ratio(self) -> float:
        return self.durable_events_per_second / self.baseline_events_per_second

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ratio": self.ratio, "met": self.ratio >= TARGET}


def _record(url: str, scenario: str, version: str, recorders: int, runs: int) -> tuple[int, float]:
    """``runs`` runs split over ``recorders`` threads into the store at ``url``: (events stored,
    seconds)."""
    spec = get_scenario(scenario)
    plans = list(plan_runs(spec, model_version=version, runs=runs, seed=7))
    store = EventStore.open(url)
    errors: list[BaseException] = []

    def record(share: list[Any]) -> None:
        try:
            for plan in share:
                launch(store, spec, instance_id=plan.instance_id, model_version=version,
                       seed=plan.seed, run_id=plan.run_id)  # fmt: skip
        except BaseException as exc:  # reported below, never lost in a thread
            errors.append(exc)

    threads = [
        threading.Thread(target=record, args=(plans[n::recorders],)) for n in range(recorders)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    try:
        if errors:
            raise errors[0]
        events = store.last_position()
    finally:
        store.close()
    return events, seconds


@contextmanager
def _sqlite(folder: Path) -> Iterator[str]:
    with tempfile.TemporaryDirectory(dir=folder) as name:
        url = f"sqlite:///{name}/record.db"
        EventStore.open(url).close()
        yield url


def run_recorders_benchmark(
    *,
    scenario: str = "invoice-extraction",
    model_version: str = "sim-v2",
    recorders: int = 8,
    runs: int = 200,
    repeat: int = 3,
    db: str | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> RecordersBench:
    """Measure both sides ``repeat`` times, interleaved; medians."""
    postgres = db is not None and db.startswith("postgresql")
    if postgres:
        from .ingest import _fresh_store

        def durable() -> Any:
            return _fresh_store(db, Path(tempfile.gettempdir()))

        @contextmanager
        def baseline() -> Iterator[str]:
            with _fresh_store(db, Path(tempfile.gettempdir())) as url:
                # the schema's search_path option, and commits that do not wait for the WAL
                yield url.replace("options=-c", "options=-csynchronous_commit%3Doff%20-c", 1)

        label = "synchronous_commit = off"
    else:
        if not RAM_DISK.is_dir():
            raise RuntimeError("bench record --recorders needs a RAM disk at /dev/shm")

        def durable() -> Any:
            return _sqlite(Path(tempfile.gettempdir()))

        def baseline() -> Any:
            return _sqlite(RAM_DISK)

        label = "the database on a RAM disk (/dev/shm)"
    _record_once = _record  # warm: imports and the scenario loaded before any clock
    with durable() as url:
        _record_once(url, scenario, model_version, 1, 2)
    rates: dict[str, list[float]] = {"durable": [], "baseline": []}
    events = 0
    for n in range(repeat):
        for side, opened in (("durable", durable), ("baseline", baseline)):
            with opened() as url:
                events, seconds = _record(url, scenario, model_version, recorders, runs)
            rates[side].append(events / seconds)
            progress(f"{side} {n + 1}/{repeat}: {events:,} events, {events / seconds:,.0f}/s")
    return RecordersBench(
        engine="postgresql" if postgres else "sqlite",
        recorders=recorders,
        runs=runs,
        events=events,
        durable_events_per_second=statistics.median(rates["durable"]),
        baseline_events_per_second=statistics.median(rates["baseline"]),
        baseline=label,
    )


__all__ = ["TARGET", "RecordersBench", "run_recorders_benchmark"]
