"""``steplog chaos``: which steps are fragile? (forks with injected tool faults)."""

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from ._shared import (
    DbOption,
    JsonOption,
    _opened,
    _print_json,
    app,
    console,
    description_column,
    err_console,
)

if TYPE_CHECKING:
    from ..chaos import ChaosProfile

FAULT_NAMES = "timeout, rate_limit, empty, truncated, schema_drift"  # kept light: no import


@app.command("chaos")
def chaos_cmd(
    run_id: Annotated[
        str | None, typer.Argument(help="The finished scenario run to profile (or --set).")
    ] = None,
    set_name: Annotated[
        str | None,
        typer.Option("--set", metavar="NAME", help="Profile every run of a regression set."),
    ] = None,
    forks: Annotated[
        int,
        typer.Option(min=1, max=1000, help="Forks per step and fault (distinct recorded seeds)."),
    ] = 20,
    faults: Annotated[
        str | None,
        typer.Option(metavar="A,B", help=f"Faults to inject (default: all: {FAULT_NAMES})."),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Fork a run at each tool call with injected faults: which steps still complete?"""
    from ..chaos import chaos, chaos_set, parse_faults
    from ..errors import SteplogError

    if (run_id is None) == (set_name is None):
        raise SteplogError("give a run id or --set NAME (one of them)")
    chosen = parse_faults(faults)
    with _opened(db) as store, _progress() as on_fork:
        if set_name is not None:
            profile = chaos_set(store, set_name, faults=chosen, forks=forks, on_fork=on_fork)
        else:
            assert run_id is not None
            profile = chaos(store, run_id, faults=chosen, forks=forks, on_fork=on_fork)
    if as_json:
        _print_json(profile.as_dict())
        return
    _show(profile)


class _progress:
    """A transient progress bar on stderr (when it is a terminal); yields the fork callback."""

    def __enter__(self) -> Any:
        if not err_console.is_terminal:
            self._bar = None
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        columns = (description_column(), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        self._bar = Progress(*columns, console=err_console, transient=True)
        self._bar.__enter__()
        task = self._bar.add_task("chaos forks", total=None)
        bar = self._bar

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


def _show(profile: "ChaosProfile") -> None:
    title = f"chaos profile of {profile.target} ({profile.forks_per_step} forks per cell)"
    from rich.table import Column

    headers = ("step", "tool", "unfaulted", *profile.faults)
    table = Table(*(Column(h, no_wrap=True) for h in headers), title=title)
    fragile = {(s.step, s.scenario, fault) for s, fault in profile.fragile}
    for step in profile.steps:
        cells = []
        for fault in profile.faults:
            pairs = step.faults[fault]
            mark = " FRAGILE" if (step.step, step.scenario, fault) in fragile else ""
            cells.append(_cell(pairs.faulted, pairs.n) + mark)
        name = f"{step.step_index} {step.step}"
        if profile.kind == "set" and len({s.scenario for s in profile.steps}) > 1:
            name = f"{step.scenario}: {name}"
        table.add_row(name, step.tool, _cell(step.baseline_completed, step.baseline_forks), *cells)
    console.print(table)
    if profile.skipped:
        console.print(
            f"skipped (no tool call): {', '.join(profile.skipped)}", highlight=False, markup=False
        )
    console.print(profile.summary, highlight=False, markup=False)
    console.print(
        "completion with 95% Wilson intervals; FRAGILE: significantly below the unfaulted twin "
        "forks (same seeds; Tango paired score test, Benjamini-Hochberg over all cells)",
        highlight=False,
        markup=False,
    )
    for session in profile.sessions[:3]:
        console.print(f"forks: steplog runs --session {session}", highlight=False, markup=False)


def _cell(completed: int, forks: int) -> str:
    from ..chaos.report import rate

    shown = rate(completed, forks)
    if shown["rate"] is None:
        return "-"
    low, high = shown["ci"]
    return f"{completed}/{forks} {shown['rate']:.0%} [{low * 100:.0f}-{high:.0%}]"
