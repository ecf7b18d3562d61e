"""Where to fork a failed scenario run so that the fork can change its outcome.

A step failure is decided at its step: forking there re-does that step live. Run-level limits
are different: the completion criterion is checked (and its failure recorded) after the last
step, where nothing is left to re-do, and run budgets add up over earlier steps. For those the
fork point is the earliest step whose live re-run can change the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..projections.run_state import RunState
from .scenario import ScenarioSpec
from .simulated import truth

RUN_BUDGETS = frozenset({"run_token_budget", "timeout_seconds"})
"""Budgets every step spends: only a fork from step 0 re-spends them."""


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """The step to fork a run at, and why that one."""

    step: int
    reason: str


def fork_point(state: RunState, scenario: ScenarioSpec) -> ForkPoint:
    """The earliest step of ``state``'s failed run whose live re-run can change its outcome."""
    failed_at = state.failure_step_index
    kind = state.failure_type
    if failed_at is None:
        return ForkPoint(0, "the run names no failed step: from the start")
    if kind == "completion_criterion":
        return _criterion_point(state, scenario, failed_at)
    if kind in RUN_BUDGETS or state.budget_exceeded in RUN_BUDGETS:
        budget = kind if kind in RUN_BUDGETS else state.budget_exceeded
        return ForkPoint(0, f"{budget} is spent by every step: from the start")
    if kind == "allowed_total_retries" or state.budget_exceeded == "allowed_total_retries":
        retried = [s.index for s in state.steps if s.failed_attempts > 0]
        if retried:
            return ForkPoint(
                min(retried[0], failed_at),
                f"allowed_total_retries counts the retries from step {retried[0]} on "
                "(its first failed attempt)",
            )
    earlier = _first_wrong(state, scenario, before=failed_at)
    if earlier is not None:  # passing the failed step would still fail the criterion
        index, name, wrong = earlier
        return ForkPoint(
            index,
            f"the run failed at step {failed_at}, but the completion criterion already counts "
            f"step {index} ({name}) wrong ({', '.join(wrong)})",
        )
    return ForkPoint(failed_at, f"the run failed at step {failed_at}")


def _criterion_point(state: RunState, scenario: ScenarioSpec, failed_at: int) -> ForkPoint:
    """The first step whose output the completion criterion counts as wrong."""
    if scenario.completion is None or state.task_instance_id is None:
        return ForkPoint(0, "the run-level criterion is not known here: from the start")
    found = _first_wrong(state, scenario, before=failed_at + 1)
    if found is not None:
        index, name, wrong = found
        return ForkPoint(
            index,
            f"the completion criterion failed at the end (step {failed_at}); step {index} "
            f"({name}) is the first whose output it counts wrong ({', '.join(wrong)})",
        )
    return ForkPoint(0, "the completion criterion reads every step's output: from the start")


def _first_wrong(
    state: RunState, scenario: ScenarioSpec, *, before: int
) -> tuple[int, str, list[str]] | None:
    """The first completed step before ``before`` whose output the criterion counts wrong."""
    completion = scenario.completion
    if completion is None or completion.check != "field_accuracy":
        return None
    if state.task_instance_id is None:
        return None
    instance = scenario.instance(state.task_instance_id)
    for step in scenario.steps_for(instance)[:before]:
        if step.name not in state.values:
            continue
        output = state.values[step.name] or {}
        wrong = [
            name
            for name in step.spec.fields
            if output.get(name) != truth(instance.id, step.name, name)
        ]
        if wrong:
            return step.index, step.name, wrong
    return None
