"""How ``steplog run`` and ``steplog show`` print runs for people."""

from collections import Counter
from typing import TYPE_CHECKING, Any

from rich.table import Table

from ._shared import console, styled

if TYPE_CHECKING:
    from ..projections import RunStateView


def print_outcomes(outcomes: list[Any]) -> None:
    """A batch of runs: how many ended how, and the failure types."""
    statuses = Counter(o.status for o in outcomes)
    failures = Counter(o.failure_type for o in outcomes if o.failure_type)
    total = len(outcomes)
    completed = statuses.get("completed", 0)
    console.print(
        f"{total} run(s): "
        + ", ".join(f"{count} {status}" for status, count in statuses.most_common())
        + f" (completion {completed / total:.1%})",
        highlight=False,
    )
    if failures:
        console.print(
            "failure types: "
            + ", ".join(f"{kind} x{count}" for kind, count in failures.most_common()),
            highlight=False,
        )
    if total == 1:
        console.print(f"run id: {outcomes[0].run_id}  (steplog show {outcomes[0].run_id})")


def print_state(state: "RunStateView") -> None:
    """A run's state: its header, failure and steps."""
    console.print(
        styled(
            (state.run_id, "bold"),
            f"  {state.scenario} / {state.task_instance_id} on "
            f"{state.model_version} (seed {state.seed})\nstatus ",
            (state.status, "bold"),
            f"  mode {state.run_mode}  retries {state.retries}  "
            f"tokens {state.tokens:,}  cost ${state.cost_usd:.4f}",
        ),
        highlight=False,
    )
    failure = state.failure
    if failure is not None and failure.error_type:
        console.print(
            f"failure: {failure.error_type} at {failure.step}: {failure.message}",
            highlight=False,
            markup=False,
        )
    table = Table("#", "step", "status", "attempts", "last error", "output", box=None)
    for step in state.steps:
        table.add_row(
            str(step.index),
            step.name,
            step.status,
            str(step.attempts),
            step.last_error or "",
            step.output_summary or "",
        )
    console.print(table)
