"""``steplog bench record``: the harness end to end against the store's own append rate.

The harness runs a scenario with its zero-latency simulated model (the simulated clock moves,
the wall clock does not wait) into a fresh SQLite store, and every batch it appends is captured.
After each run, the baseline appends exactly that run's batches -- same sizes, same expected
versions, same durable commit per step -- straight through ``EventStore.append`` into another
fresh store (interleaved run by run, so a burst of load elsewhere hits both sides alike). The
ratio is what the harness (model simulation, validation, budgets, run state) costs on top of
storing its events. Target: >= 0.8x (issue 20).

Both sides start on fresh database files in a warm process (the scenario is loaded and the
harness's modules imported by an untimed run first); both stores are counted afterwards and
must hold every captured event, or the benchmark stops.

Each side's CPU time is kept too, and one more pass runs the same runs into a stub store that
keeps the batches and writes nothing (no commit to wait for): the harness's own work measured
alone. Its CPU against the harness's CPU beyond its appends in the real pass shows what the
same code costs when it runs between durable commits (a process that blocks on every commit
comes back to cold caches), which the ratio charges to the harness.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from ..harness.batch import plan_runs
from ..harness.runner import launch
from ..harness.scenario import get_scenario
from ..store import EventStore
from ._agents import CapturingStore, StubStore, capturing, stored_events

TARGET = 0.8


@dataclass(frozen=True, slots=True)
class RecordBench:
    """Harness and baseline rates for one scenario, with each side's CPU per run."""

    scenario: str
    model_version: str
    runs: int
    events: int
    batches: int
    harness_events_per_second: float
    append_events_per_second: float
    harness_cpu_ms_per_run: float | None = None
    append_cpu_ms_per_run: float | None = None
    code_alone_cpu_ms_per_run: float | None = None
    """The harness into a stub store that writes nothing (no commit to wait for)."""

    @property
    def ratio(self) -> float:
        """Harness rate over the store's rate on the identical batches."""
        return self.harness_events_per_second / self.append_events_per_second

    @property
    def verdict(self) -> str:
        """``>= 0.8x ok`` or ``MISSED``."""
        return f">= {TARGET}x {'ok' if self.ratio >= TARGET else 'MISSED'}"

    @property
    def own_cpu_ms_per_run(self) -> float | None:
        """The harness's CPU beyond its appends in the real pass (its appends cost what the
        baseline's do: the same batches through the same store)."""
        if self.harness_cpu_ms_per_run is None or self.append_cpu_ms_per_run is None:
            return None
        return self.harness_cpu_ms_per_run - self.append_cpu_ms_per_run

    @property
    def own_us_per_event(self) -> float | None:
        """:attr:`own_cpu_ms_per_run` per event: the harness's recorder *and* its simulated
        agent (they cannot run apart), so an upper bound on what recording costs per event."""
        own = self.own_cpu_ms_per_run
        return None if own is None else 1000 * own * self.runs / self.events

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            **asdict(self),
            "ratio": self.ratio,
            "verdict": self.verdict,
            "own_cpu_ms_per_run": self.own_cpu_ms_per_run,
            "own_us_per_event": self.own_us_per_event,
        }


@dataclass(frozen=True, slots=True)
class _Sample:
    """One round: wall and CPU seconds of each side, and the stub pass's CPU seconds."""

    harness_seconds: float
    append_seconds: float
    harness_cpu: float
    append_cpu: float
    stub_cpu: float
    events: int
    batches: int


def _measure(folder: Path, scenario: str, version: str, runs: int) -> _Sample:
    """The interleaved pass (harness, then the baseline on that run's batches), then the stub
    pass over the same runs."""
    spec = get_scenario(scenario)
    plans = plan_runs(spec, model_version=version, runs=runs, seed=1)
    harness = capturing(CapturingStore, folder / "harness.db")
    baseline = EventStore.open(str(folder / "append.db"))
    harness_seconds = append_seconds = harness_cpu = append_cpu = 0.0
    for plan in plans:  # run by run, each run's batches replayed at once: load hits both alike
        first = len(harness.batches)
        started, cpu = time.perf_counter(), time.process_time()
        launch(harness, spec, instance_id=plan.instance_id, model_version=version,
               seed=plan.seed, run_id=plan.run_id)  # fmt: skip
        harness_seconds += time.perf_counter() - started
        harness_cpu += time.process_time() - cpu
        started, cpu = time.perf_counter(), time.process_time()
        for run_id, events, expected in harness.batches[first:]:
            baseline.append(run_id, events, expected)
        append_seconds += time.perf_counter() - started
        append_cpu += time.process_time() - cpu
    harness.close()
    baseline.close()
    count = sum(len(events) for _, events, _ in harness.batches)
    for name in ("harness.db", "append.db"):
        stored = stored_events(folder / name)
        if stored != count:
            raise RuntimeError(f"{name} holds {stored:,} events; {count:,} were appended")
    stub = capturing(StubStore, folder / "stub.db")
    cpu = time.process_time()
    for plan in plans:
        launch(stub, spec, instance_id=plan.instance_id, model_version=version,
               seed=plan.seed, run_id=plan.run_id)  # fmt: skip
    stub_cpu = time.process_time() - cpu
    stub.close()
    if [len(b) for _, b, _ in stub.batches] != [len(b) for _, b, _ in harness.batches]:
        raise RuntimeError("the stub pass recorded other batches than the real one")
    if stored_events(folder / "stub.db") != 0:
        raise RuntimeError("the stub store wrote events")
    return _Sample(harness_seconds, append_seconds, harness_cpu, append_cpu, stub_cpu, count,
                   len(harness.batches))  # fmt: skip


def _warm_up(folder: Path, scenario: str, version: str) -> None:
    """One untimed run, so imports and scenario loading are not part of either figure."""
    spec = get_scenario(scenario)
    plan = plan_runs(spec, model_version=version, runs=1, seed=99)[0]
    store = EventStore.open(str(folder / "warm.db"))
    launch(store, spec, instance_id=plan.instance_id, model_version=version, seed=plan.seed,
           run_id=plan.run_id)  # fmt: skip
    store.close()


def run_record_benchmark(
    *,
    scenario: str = "invoice-extraction",
    model_version: str = "sim-v2",
    runs: int = 100,
    repeat: int = 3,
    progress: Console | None = None,
) -> RecordBench:
    """Median of ``repeat`` measurements, each on fresh stores."""
    samples = []
    for attempt in range(repeat):
        if progress is not None:
            progress.print(f"record {scenario}/{model_version}: round {attempt + 1}/{repeat}")
        with tempfile.TemporaryDirectory(prefix="steplog-bench-") as tmp:
            if attempt == 0:
                _warm_up(Path(tmp), scenario, model_version)
            samples.append(_measure(Path(tmp), scenario, model_version, runs))
    harness = statistics.median(s.harness_seconds for s in samples)
    append = statistics.median(s.append_seconds for s in samples)
    events, batches = samples[0].events, samples[0].batches

    def per_run(seconds: float) -> float:
        return 1000 * seconds / runs

    return RecordBench(
        scenario,
        model_version,
        runs,
        events,
        batches,
        events / harness,
        events / append,
        harness_cpu_ms_per_run=per_run(statistics.median(s.harness_cpu for s in samples)),
        append_cpu_ms_per_run=per_run(statistics.median(s.append_cpu for s in samples)),
        code_alone_cpu_ms_per_run=per_run(statistics.median(s.stub_cpu for s in samples)),
    )
