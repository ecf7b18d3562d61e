"""``steplog bench attribute``, the multi-agent set: decisive step and agent, on planted mistakes.

Runs of the ground-truth scenario ``planted-team`` (``seeds/attribution``: four agents, 30
steps; the model version ``sim-planted`` makes one systematic silent mistake per task instance
at a step drawn from the instance, which fails the completion criterion at the last step) are
recorded into a fresh SQLite store. Each failed run is blamed onto ``sim-strong``
(:func:`steplog.attribution.blame.blame`: the step search, then one agent upgraded at a time);
the answer is scored against the planted step and the agent the scenario assigns to it
(:func:`steplog.harness.simulated.planted_step`, which the attribution never calls). Next to
it, in the same run: the constant baselines (always the first step and its agent; always the
failure step's agent), the agent the run recorded at the step found (blame without its forks),
and the exhaustive cost (every step up to the failure, then every agent, ``forks`` forks each).

A second, smaller set checks the other answer: runs of ``sim-sloppy``, whose silent errors are
random slips any fresh sample avoids, should get "no single agent"; the share that does (and so
how often an agent is blamed wrongly, repeated looks included) is reported with its interval.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from ..attribution.blame import blame
from ..errors import SteplogError
from ..harness.batch import execute_all, plan_runs
from ..harness.runner import fold_run
from ..harness.scenario import get_scenario
from ..harness.simulated import planted_step
from ..stats.proportions import proportion
from ..store import EventStore
from .attribute import planted_store

SCENARIO = "planted-team"
PLANTED, RESCUER, SLOPPY = "sim-planted", "sim-strong", "sim-sloppy"


@dataclass(frozen=True, slots=True)
class AgentBench:
    """Accuracy and cost of step search plus agent blame, the baselines, the exhaustive cost."""

    runs: int
    agents: int
    forks_per_step: int
    step_correct: int
    agent_correct: int
    both_correct: int
    no_single_agent: int
    plateaus: int
    not_rescuable: int
    mean_forks: float
    mean_step_forks: float
    mean_blame_forks: float
    max_forks: int
    first_step_correct: int
    first_agent_correct: int
    failure_agent_correct: int
    step_agent_correct: int
    """The agent recorded at the step the search found (no blame forks) is the planted one."""
    exhaustive_forks: float
    cpu_seconds_per_fork: float
    seconds_per_fork: float
    skipped_runs: int
    sloppy_runs: int
    sloppy_no_single_agent: int
    """Runs of random slips answered "no single agent" (the right answer)."""
    sloppy_mean_forks: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form, with accuracies as Wilson intervals."""

        def share(count: int) -> dict[str, Any]:
            return proportion(count, self.runs).as_dict()

        return {
            **asdict(self),
            "step_accuracy": share(self.step_correct),
            "agent_accuracy": share(self.agent_correct),
            "first_step_accuracy": share(self.first_step_correct),
            "first_agent_accuracy": share(self.first_agent_correct),
            "failure_agent_accuracy": share(self.failure_agent_correct),
            "step_agent_accuracy": share(self.step_agent_correct),
            "forks_vs_exhaustive": self.mean_forks / self.exhaustive_forks,
            "sloppy_no_single_agent_share": (
                proportion(self.sloppy_no_single_agent, self.sloppy_runs).as_dict()
                if self.sloppy_runs
                else None
            ),
        }


def run_agent_benchmark(
    *, runs: int = 200, forks: int = 10, seed: int = 1, sloppy_runs: int = 40
) -> AgentBench:
    """Blame ``runs`` failed planted-team runs (score the step and the agent), and
    ``sloppy_runs`` failed runs of random slips (count "no single agent")."""
    with planted_store("planted-team.toml", "attribute-agents") as store:
        return _measure(store, runs, forks, seed, sloppy_runs)


def _failed(store: EventStore, version: str, runs: int, seed: int) -> tuple[list[str], int]:
    """Up to ``runs`` runs of ``version`` that failed at the completion criterion; and how many
    other failures were skipped."""
    scenario = get_scenario(SCENARIO)
    planned = runs + runs // 10 + 5 if version == PLANTED else 3 * runs + 5
    chosen: list[str] = []
    skipped = 0
    plans = plan_runs(scenario, model_version=version, runs=planned, seed=seed)
    for outcome in execute_all(store.url, plans):
        if len(chosen) == runs:
            break
        if outcome.failure_type == "completion_criterion":
            chosen.append(outcome.run_id)
        elif outcome.status != "completed":
            skipped += 1
    return chosen, skipped


def _sloppy(store: EventStore, runs: int, forks: int, seed: int) -> tuple[int, int, float]:
    chosen, _ = _failed(store, SLOPPY, runs, seed + 100_000) if runs else ([], 0)
    right = spent = 0
    for run_id in chosen:
        found = blame(store, run_id, rescuer=RESCUER, forks=forks)
        right += found.verdict == "no_single_agent"
        spent += found.forks_spent
    return len(chosen), right, spent / max(len(chosen), 1)


def _measure(store: EventStore, runs: int, forks: int, seed: int, sloppy_runs: int) -> AgentBench:
    scenario = get_scenario(SCENARIO)
    spec = scenario.model(PLANTED)
    roles = scenario.roles
    failed, skipped = _failed(store, PLANTED, runs, seed)
    chosen: list[tuple[str, int, str]] = []
    for run_id in failed:
        state = fold_run(store, run_id)
        instance = scenario.instance(state.task_instance_id or "")
        step = planted_step(PLANTED, spec, state.seed, instance.id)
        assert step is not None
        agent = scenario.steps_for(instance)[step].spec.role or ""
        chosen.append((run_id, step, agent))
    if not chosen:
        raise SteplogError("no recorded run failed at its completion criterion; nothing to score")
    counts = dict.fromkeys(
        (
            "step",
            "agent",
            "both",
            "nobody",
            "plateau",
            "unrescuable",
            "first_step",
            "first_agent",
            "failure_agent",
            "step_agent",
        ),
        0,
    )
    spent: list[int] = []
    step_spent: list[int] = []
    exhaustive: list[int] = []
    started, cpu = time.perf_counter(), time.process_time()
    for run_id, truth_step, truth_agent in chosen:
        found = blame(store, run_id, rescuer=RESCUER, forks=forks)
        located = found.attribution
        counts["step"] += located.decisive_step == truth_step
        counts["agent"] += found.blamed == truth_agent
        counts["both"] += located.decisive_step == truth_step and found.blamed == truth_agent
        counts["nobody"] += found.verdict == "no_single_agent"
        counts["plateau"] += located.verdict == "plateau"
        counts["unrescuable"] += located.verdict == "not_rescuable"
        counts["first_step"] += truth_step == 0
        counts["first_agent"] += truth_agent == roles[0]
        counts["failure_agent"] += truth_agent == found.failure_agent
        counts["step_agent"] += found.step_agent == truth_agent
        spent.append(found.forks_spent)
        step_spent.append(located.located.forks_spent)
        exhaustive.append(located.exhaustive_cost + len(roles) * forks)
    cpu_spent, elapsed = time.process_time() - cpu, time.perf_counter() - started
    done = len(chosen)
    total = max(sum(spent), 1)
    sloppy, sloppy_right, sloppy_forks = _sloppy(store, sloppy_runs, forks, seed)
    return AgentBench(
        runs=done,
        agents=len(roles),
        forks_per_step=forks,
        step_correct=counts["step"],
        agent_correct=counts["agent"],
        both_correct=counts["both"],
        no_single_agent=counts["nobody"],
        plateaus=counts["plateau"],
        not_rescuable=counts["unrescuable"],
        mean_forks=sum(spent) / done,
        mean_step_forks=sum(step_spent) / done,
        mean_blame_forks=(sum(spent) - sum(step_spent)) / done,
        max_forks=max(spent),
        first_step_correct=counts["first_step"],
        first_agent_correct=counts["first_agent"],
        failure_agent_correct=counts["failure_agent"],
        step_agent_correct=counts["step_agent"],
        exhaustive_forks=sum(exhaustive) / done,
        cpu_seconds_per_fork=cpu_spent / total,
        seconds_per_fork=elapsed / total,
        skipped_runs=skipped,
        sloppy_runs=sloppy,
        sloppy_no_single_agent=sloppy_right,
        sloppy_mean_forks=sloppy_forks,
    )
