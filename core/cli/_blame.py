"""Rendering ``steplog attribute RUN --by-agent``: the agents' rescue rates and the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from ._shared import console

if TYPE_CHECKING:
    from ..attribution.blame import AgentBlame


def show_blame(result: AgentBlame) -> None:
    """The per-agent table, then one line for the step and one for the blame."""
    found = result.attribution
    console.print(found.summary, highlight=False, markup=False)
    if result.step is not None:
        table = Table(
            "agent",
            "forks",
            "rescued",
            "rate",
            "95% CI (Wilson)",
            title=f"{found.rescuer} for one agent at a time, step {result.step}",
        )
        for point in result.agents:
            if not point.forks:
                table.add_row(point.agent, "0", "-", "-", "does not act from this step on")
                continue
            rate = point.interval
            mark = " <- blamed" if point.agent == result.blamed else ""
            table.add_row(
                f"{point.agent}{mark}",
                str(point.forks),
                str(point.rescued),
                f"{rate.estimate:.0%}",
                f"[{rate.low:.0%}, {rate.high:.0%}]",
            )
        console.print(table)
    console.print(result.summary, highlight=False, markup=False)
    console.print(f"forks: steplog runs --session {found.session}", highlight=False, markup=False)
