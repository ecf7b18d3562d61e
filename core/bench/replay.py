"""``steplog bench replay``: replays per second of 50-step runs, against reading their events.

A 50-step scenario (tool + model per step, flaky tools so there are retries) is recorded into a
fresh SQLite store; then each run's events are read (the I/O floor), and each run is replayed
exactly, writing (the new run in one transaction) and check-only (compared in memory). Replay
serves recorded responses without sleeping or calling a model, so its cost is event I/O and
the serialization and comparison of the events.

``steplog bench replay --check`` (:func:`run_check_benchmark`): check-only replays of 1,000
demo runs (one batch, as ``regress --check`` runs them) against reading the same runs' events
one run at a time (the fastest read: one query over all of them is no faster), in CPU time,
target <= 60 s and <= 3x the read.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..harness.batch import execute_all, plan_runs
from ..harness.scenario import ENV_SCENARIOS, get_scenario
from ..replay import replay
from ..store import EventStore

SCENARIO = """
name = "bench-long-chain"
version = "1"
[config]
max_retry_per_step = 3
[[instances]]
id = "long-1"
[[steps]]
name = "step_{n}"
repeat = 50
tool = "fetch"
fields = ["value", "check"]
[models.sim-v1]
tool_error_rate = 0.05
latency_ms = 900
wall_latency_ms = 0
[models.sim-v2]
latency_ms = 900
"""


@dataclass(frozen=True, slots=True)
class ReplayBench:
    """Replay throughput next to reading the same runs' events."""

    runs: int
    events_per_run: float
    read_seconds_per_run: float
    replay_seconds_per_run: float
    identical: int
    check_seconds_per_run: float | None = None
    """Check-only replays (compared in memory, nothing written), when measured."""
    agent_seconds_per_run: float | None = None
    """The agent alone (no run, no steplog; ``--sdk``): the client's own work, when measured."""
    agent: str | None = None
    """Which agent (``--sdk``: the zero-code openai one or the decorated one)."""

    @classmethod
    def of(
        cls,
        sizes: list[int],
        reads: list[float],
        replays: list[float],
        identical: int,
        *,
        checks: list[float] | None = None,
        agents: list[float] | None = None,
        agent: str | None = None,
    ) -> ReplayBench:
        """From per-run samples: the mean run size, the median of each timing."""
        return cls(
            len(sizes),
            statistics.mean(sizes),
            statistics.median(reads),
            statistics.median(replays),
            identical,
            None if checks is None else statistics.median(checks),
            None if agents is None else statistics.median(agents),
            agent,
        )

    @property
    def agent_ratio_to_read(self) -> float | None:
        """The agent alone in reads: the floor under any replay of it (the client's work)."""
        if self.agent_seconds_per_run is None:
            return None
        return self.agent_seconds_per_run / self.read_seconds_per_run

    @property
    def ratio_to_agent(self) -> float | None:
        """The replay over the agent alone: what steplog multiplies the client's work by."""
        if self.agent_seconds_per_run is None:
            return None
        return self.replay_seconds_per_run / self.agent_seconds_per_run

    @property
    def overhead_ratio_to_read(self) -> float | None:
        """The replay's cost above the agent alone, in reads: steplog's share."""
        if self.agent_seconds_per_run is None:
            return None
        return (
            self.replay_seconds_per_run - self.agent_seconds_per_run
        ) / self.read_seconds_per_run

    @property
    def check_ratio_to_read(self) -> float | None:
        """How many times longer a check-only replay takes than reading the run's events."""
        if self.check_seconds_per_run is None:
            return None
        return self.check_seconds_per_run / self.read_seconds_per_run

    @property
    def replays_per_second(self) -> float:
        """Exact replays per second."""
        return 1 / self.replay_seconds_per_run

    @property
    def ratio_to_read(self) -> float:
        """How many times longer a replay takes than reading the run's events."""
        return self.replay_seconds_per_run / self.read_seconds_per_run

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            **asdict(self),
            "replays_per_second": self.replays_per_second,
            "ratio_to_read": self.ratio_to_read,
            "check_ratio_to_read": self.check_ratio_to_read,
            "overhead_ratio_to_read": self.overhead_ratio_to_read,
            "agent_ratio_to_read": self.agent_ratio_to_read,
            "ratio_to_agent": self.ratio_to_agent,
        }


def run_replay_benchmark(*, runs: int = 20) -> ReplayBench:
    """Record ``runs`` 50-step runs, then time reading and replaying each of them."""
    with tempfile.TemporaryDirectory(prefix="steplog-bench-") as tmp:
        folder = Path(tmp)
        (folder / "bench-long-chain.toml").write_text(SCENARIO)
        previous = os.environ.get(ENV_SCENARIOS)
        os.environ[ENV_SCENARIOS] = str(folder)
        try:
            store = EventStore.open(str(folder / "replay.db"))
            plans = plan_runs(
                get_scenario("bench-long-chain"), model_version="sim-v1", runs=runs, seed=1
            )
            outcomes = execute_all(store.url, plans)
            reads, replays, checks, sizes, identical = [], [], [], [], 0
            for outcome in outcomes:
                started = time.perf_counter()
                events = store.read_run(outcome.run_id)
                reads.append(time.perf_counter() - started)
                sizes.append(len(events))
                started = time.perf_counter()
                result = replay(store, outcome.run_id)
                replays.append(time.perf_counter() - started)
                identical += bool(result.identical)
                started = time.perf_counter()
                replay(store, outcome.run_id, check=True)
                checks.append(time.perf_counter() - started)
            store.close()
        finally:
            if previous is None:
                os.environ.pop(ENV_SCENARIOS, None)
            else:
                os.environ[ENV_SCENARIOS] = previous
    return ReplayBench.of(sizes, reads, replays, identical, checks=checks)


@dataclass(frozen=True, slots=True)
class CheckBench:
    """Check-only replays of demo runs next to reading the same runs' events, and the writing
    replay's ratio beside them (all measured in one process, one run).

    Seconds are CPU seconds of this process (SQLite runs in it): on a shared host wall time
    swings with the other processes' load between two measurements, CPU time much less. The
    read is the faster of two passes over the runs (the first may be cold). ``*_wall_seconds``
    are wall-clock times; the 60 s target is on the wall clock."""

    runs: int
    events: int
    read_seconds: float
    check_seconds: float
    write_runs: int
    write_seconds: float
    write_read_seconds: float
    unchanged: int
    identical_written: int
    read_wall_seconds: float = 0.0
    check_wall_seconds: float = 0.0
    write_wall_seconds: float = 0.0
    target_seconds: float = 60.0
    target_ratio: float = 3.0

    @property
    def check_ratio(self) -> float:
        """Check-only replay time over reading the same runs' events (CPU time)."""
        return self.check_seconds / self.read_seconds

    @property
    def write_ratio(self) -> float:
        """Writing exact replay time over reading the same runs' events (its sample; CPU
        time, so the commits' waits for the disk are not in it)."""
        return self.write_seconds / self.write_read_seconds

    @property
    def met(self) -> bool:
        """Both targets: <= 60 s (wall clock) for the runs, <= 3x the read."""
        return (
            self.check_wall_seconds <= self.target_seconds and self.check_ratio <= self.target_ratio
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            **asdict(self),
            "check_ratio": self.check_ratio,
            "write_ratio": self.write_ratio,
            "met": self.met,
        }


T = TypeVar("T")


def _timed(work: Callable[[], T]) -> tuple[float, float, T]:
    """CPU seconds, wall seconds and result of ``work()``."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = work()
    return time.process_time() - cpu, time.perf_counter() - wall, result


def run_check_benchmark(*, runs: int = 1000, write_runs: int = 100) -> CheckBench:
    """Seed ``runs`` demo runs (every seeded scenario, both demo versions) into a fresh SQLite
    store; time reading each run's events (twice: the faster pass counts), replaying each
    check-only (one batch, as ``regress --check`` does), and replaying the first
    ``write_runs`` writing (one transaction per new run)."""
    from ..harness.scenario import registered_scenarios
    from ..replay import check_runs

    specs = list(registered_scenarios().values())
    cells = [(spec, version) for spec in specs for version in spec.versions_for_demo()]
    per_cell = -(-runs // len(cells))
    plans = [
        plan
        for spec, version in cells
        for plan in plan_runs(
            spec,
            model_version=version,
            runs=per_cell,
            seed=0,
            run_id_prefix=f"demo-{spec.name}-{version}-",
        )
    ][:runs]
    with tempfile.TemporaryDirectory(prefix="steplog-bench-") as tmp:
        store = EventStore.open(str(Path(tmp) / "check.db"))
        try:
            outcomes = execute_all(store.url, plans)
            run_ids = [
                o.run_id for o in outcomes if o.status not in ("running", "awaiting_approval")
            ]

            def read(ids: list[str]) -> int:
                return sum(len(store.read_run(run_id)) for run_id in ids)

            reads = [_timed(lambda: read(run_ids)) for _ in range(2)]
            read_cpu, read_wall, events = min(reads)
            check_cpu, check_wall, checked = _timed(lambda: check_runs(store, run_ids))
            unchanged = sum(sample.passed for sample in checked)
            sample = run_ids[:write_runs]
            write_read = min(_timed(lambda: read(sample))[0] for _ in range(2))
            write_cpu, write_wall, identical = _timed(
                lambda: sum(bool(replay(store, run_id).identical) for run_id in sample)
            )
        finally:
            store.close()
    return CheckBench(
        len(run_ids),
        events,
        read_cpu,
        check_cpu,
        len(sample),
        write_cpu,
        write_read,
        unchanged,
        identical,
        read_wall_seconds=read_wall,
        check_wall_seconds=check_wall,
        write_wall_seconds=write_wall,
    )
