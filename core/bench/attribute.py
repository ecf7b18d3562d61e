"""``steplog bench attribute``: decisive-step accuracy and forks spent on planted failures.

Runs of the ground-truth scenario ``planted-ledger`` (``seeds/attribution``: 30 chained steps;
the model version ``sim-planted`` makes one silent error per run at a seeded step, which fails
the run's completion criterion at the last step) are recorded into a fresh SQLite store. Each
failed run is attributed onto ``sim-strong``; the answer is scored against the planted step
(:func:`steplog.harness.simulated.planted_step`, which the attribution never calls). Next to it,
in the same run: the constant baselines (always the first step; always the failure step) and the
exhaustive scan (every step up to the failure, ``forks`` forks each): its cost in forks for every
run, and its accuracy on the first ``scan_runs`` runs.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..attribution import attribute
from ..errors import SteplogError
from ..harness.batch import execute_all, plan_runs
from ..harness.runner import fold_run
from ..harness.scenario import ENV_SCENARIOS, get_scenario
from ..harness.simulated import planted_step
from ..resources import data_dir
from ..stats.proportions import proportion
from ..store import EventStore

SCENARIO = "planted-ledger"
PLANTED, RESCUER = "sim-planted", "sim-strong"


@dataclass(frozen=True, slots=True)
class AttributeBench:
    """Accuracy and cost of the adaptive search, the baselines and the exhaustive scan."""

    runs: int
    forks_per_step: int
    correct: int
    plateaus: int
    not_rescuable: int
    mean_forks: float
    max_forks: int
    first_step_correct: int
    failure_step_correct: int
    scan_mean_forks: float
    scan_runs: int
    scan_correct: int
    seconds_per_fork: float
    skipped_runs: int
    """Recorded runs that did not fail at the completion criterion (an unplanted failure)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form, with accuracies as Wilson intervals."""
        return {
            **asdict(self),
            "accuracy": proportion(self.correct, self.runs).as_dict(),
            "first_step_accuracy": proportion(self.first_step_correct, self.runs).as_dict(),
            "failure_step_accuracy": proportion(self.failure_step_correct, self.runs).as_dict(),
            "scan_accuracy": (
                proportion(self.scan_correct, self.scan_runs).as_dict() if self.scan_runs else None
            ),
            "forks_vs_scan": self.mean_forks / self.scan_mean_forks,
        }


@contextmanager
def planted_store(scenario_file: str, name: str) -> Iterator[EventStore]:
    """A scratch SQLite store with the ground-truth scenarios of ``seeds/attribution``
    registered (``scenario_file`` names the one needed), removed afterwards; memory-backed where
    there is one, so the forks' durable commits cost CPU, not fsync."""
    folder = data_dir("seeds", f"attribution/{scenario_file}")
    previous = os.environ.get(ENV_SCENARIOS)
    os.environ[ENV_SCENARIOS] = str(folder)
    try:
        shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
        with tempfile.TemporaryDirectory(prefix="steplog-bench-", dir=shm) as tmp:
            store = EventStore.open(str(Path(tmp) / f"{name}.db"))
            try:
                yield store
            finally:
                store.close()
    finally:
        if previous is None:
            os.environ.pop(ENV_SCENARIOS, None)
        else:
            os.environ[ENV_SCENARIOS] = previous


def run_attribute_benchmark(
    *, runs: int = 200, forks: int = 10, scan_runs: int = 2, seed: int = 1
) -> AttributeBench:
    """Attribute ``runs`` failed planted-ledger runs; score against the planted steps."""
    with planted_store("planted-ledger.toml", "attribute") as store:
        return _measure(store, runs, forks, scan_runs, seed)


def _measure(store: EventStore, runs: int, forks: int, scan_runs: int, seed: int) -> AttributeBench:
    scenario = get_scenario(SCENARIO)
    spec = scenario.model(PLANTED)
    plans = plan_runs(scenario, model_version=PLANTED, runs=runs + runs // 10 + 5, seed=seed)
    chosen: list[tuple[str, int | None, int | None]] = []
    skipped = 0
    for outcome in execute_all(store.url, plans):
        if len(chosen) == runs:
            break
        state = fold_run(store, outcome.run_id)
        if outcome.failure_type != "completion_criterion":
            skipped += 1
            continue
        truth = planted_step(PLANTED, spec, state.seed, state.task_instance_id or "")
        chosen.append((outcome.run_id, truth, state.failure_step_index))
    correct = plateaus = unrescuable = first = at_failure = 0
    spent: list[int] = []
    scan_cost: list[int] = []
    started = time.perf_counter()
    for run_id, truth, failure in chosen:
        found = attribute(store, run_id, rescuer=RESCUER, forks=forks, reuse=False)
        correct += found.decisive_step == truth
        plateaus += found.verdict == "plateau"
        unrescuable += found.verdict == "not_rescuable"
        first += truth == 0
        at_failure += truth == failure
        spent.append(found.located.forks_spent)
        scan_cost.append(found.exhaustive_cost)
    elapsed = time.perf_counter() - started
    scan_correct = 0
    scanned = chosen[: min(scan_runs, len(chosen))]
    for run_id, truth, _ in scanned:
        scan = attribute(store, run_id, rescuer=RESCUER, forks=forks, scan=True)
        scan_correct += scan.decisive_step == truth
    done = len(chosen)
    if not done:
        raise SteplogError("no recorded run failed at its completion criterion; nothing to score")
    return AttributeBench(
        runs=done,
        forks_per_step=forks,
        correct=correct,
        plateaus=plateaus,
        not_rescuable=unrescuable,
        mean_forks=sum(spent) / done,
        max_forks=max(spent),
        first_step_correct=first,
        failure_step_correct=at_failure,
        scan_mean_forks=sum(scan_cost) / done,
        scan_runs=len(scanned),
        scan_correct=scan_correct,
        seconds_per_fork=elapsed / max(sum(spent), 1),
        skipped_runs=skipped,
    )
