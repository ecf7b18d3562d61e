"""Rendering ``steplog attribute``: rescue-rate tables (per step, or per agent with
``--by-agent``), then the verdict and where the forks are."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from ._shared import console

if TYPE_CHECKING:
    from ..attribution.blame import AgentBlame
    from ..stats.results import Interval


def rate_table(key: str, title: str) -> Table:
    """A table of rescue rates, one row per ``key`` (a step or an agent)."""
    return Table(key, "forks", "rescued", "rate", "95% CI (Wilson)", title=title)


def rate_cells(label: str, forks: int, rescued: int, rate: Interval) -> tuple[str, ...]:
    """One row of :func:`rate_table`."""
    return (
        label,
        str(forks),
        str(rescued),
        f"{rate.estimate:.0%}",
        f"[{rate.low:.0%}, {rate.high:.0%}]",
    )


def show_outcome(summary: str, session: str) -> None:
    """The verdict line, then the command that lists the forks."""
    console.print(summary, highlight=False, markup=False)
    console.print(f"forks: steplog runs --session {session}", highlight=False, markup=False)


def show_blame(result: AgentBlame) -> None:
    """The per-agent table, then one line for the step and one for the blame."""
    found = result.attribution
    console.print(found.summary, highlight=False, markup=False)
    if result.step is not None:
        table = rate_table("agent", f"{found.rescuer} for one agent at a time, step {result.step}")
        for point in result.agents:
            if not point.forks:
                table.add_row(point.agent, "0", "-", "-", "does not act from this step on")
                continue
            mark = " <- blamed" if point.agent == result.blamed else ""
            label = f"{point.agent}{mark}"
            table.add_row(*rate_cells(label, point.forks, point.rescued, point.interval))
        console.print(table)
    show_outcome(result.summary, found.session)
