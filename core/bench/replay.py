"""``steplog bench replay``: replays per second of 50-step runs, against reading their events.

A 50-step scenario (tool + model per step, flaky tools so there are retries) is recorded into a
fresh SQLite store; then each run's events are read (the I/O floor), and each run is replayed
exactly. Replay serves recorded responses without sleeping or calling a model, so its cost is
event I/O: reading the recording and durably writing the new run, one commit per step.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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
            reads, replays, sizes, identical = [], [], [], 0
            for outcome in outcomes:
                started = time.perf_counter()
                events = store.read_run(outcome.run_id)
                reads.append(time.perf_counter() - started)
                sizes.append(len(events))
                started = time.perf_counter()
                result = replay(store, outcome.run_id)
                replays.append(time.perf_counter() - started)
                identical += bool(result.identical)
            store.close()
        finally:
            if previous is None:
                os.environ.pop(ENV_SCENARIOS, None)
            else:
                os.environ[ENV_SCENARIOS] = previous
    return ReplayBench(
        runs,
        statistics.mean(sizes),
        statistics.median(reads),
        statistics.median(replays),
        identical,
    )
