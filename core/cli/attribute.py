"""``steplog attribute``: which step decided a failed run? (counterfactual forks)."""

from typing import Annotated

import typer

from ..errors import SteplogError
from ._blame import rate_cells, rate_table, show_outcome
from ._shared import (
    DbOption,
    JsonOption,
    _opened,
    _print_json,
    app,
    console,
)


@app.command("attribute")
def attribute_cmd(
    rescuer: Annotated[
        str, typer.Option(help="The (stronger) model version the forks continue on.")
    ],
    run_id: Annotated[
        str | None, typer.Argument(help="The failed run (scenario or SDK) to attribute.")
    ] = None,
    forks: Annotated[
        int, typer.Option(min=1, max=1000, help="Forks per step (distinct recorded seeds).")
    ] = 10,
    scan: Annotated[
        bool, typer.Option(help="Fork every step up to the failure (exhaustive, costly).")
    ] = False,
    check_unprobed: Annotated[
        bool,
        typer.Option(
            "--check-unprobed",
            help="When the search rescues nowhere, also probe the steps it skipped (its "
            "bisection assumes rescue gets harder with depth); at most --forks/2 forks each.",
        ),
    ] = False,
    by_agent: Annotated[
        bool,
        typer.Option(
            "--by-agent",
            help="Multi-agent runs: then upgrade one agent at a time at the decisive step and "
            "blame the agent whose upgrade rescues significantly more often.",
        ),
    ] = False,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent", metavar="NAME", help="With --by-agent: blame among these agents only."
        ),
    ] = None,
    signature: Annotated[
        str | None,
        typer.Option(
            metavar="SIG", help="Batch: every failed run of this failure signature (or its prefix)."
        ),
    ] = None,
    set_name: Annotated[
        str | None,
        typer.Option("--set", metavar="NAME", help="Batch: every run of this regression set."),
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, help="With --signature: at most this many runs (oldest first).")
    ] = 100,
    import_module: Annotated[
        str | None,
        typer.Option(
            "--import",
            help="SDK runs: module (in the current folder or installed) or .py file that "
            "registers your agent; its entry point takes model_version (and role_versions "
            "for --by-agent).",
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Find the decisive step of a failed run: fork it onto a rescuer version, step by step.
    With --signature or --set: every such run (reusing recorded forks), with a histogram of
    decisive steps against failure steps per signature."""
    from ..attribution import attribute
    from .replay import import_agent_code

    chosen = [
        name
        for name, value in (("RUN", run_id), ("--signature", signature), ("--set", set_name))
        if value is not None
    ]
    if len(chosen) != 1:
        raise SteplogError(
            "attribute needs exactly one of RUN, --signature SIG or --set NAME"
            + (f" (got {' and '.join(chosen)})" if chosen else "")
        )
    if agent and not by_agent:
        raise SteplogError("--agent chooses the agents to blame: use it with --by-agent")
    if by_agent and run_id is None:
        raise SteplogError(
            "--by-agent blames the agents of one run: give RUN, not --signature/--set"
        )
    if import_module:
        import_agent_code(import_module)
    if run_id is None:
        from .attribute_batch import attribute_batch

        attribute_batch(signature, set_name, rescuer, forks, scan, limit, db, as_json)
        return
    if by_agent:
        from ..attribution.blame import blame
        from ._blame import show_blame

        with _opened(db) as store:
            blamed = blame(store, run_id, rescuer=rescuer, forks=forks, agents=agent, scan=scan)
        if as_json:
            _print_json(blamed.as_dict())
        else:
            show_blame(blamed)
        return
    with _opened(db) as store:
        result = attribute(
            store, run_id, rescuer=rescuer, forks=forks, scan=scan, check_unprobed=check_unprobed
        )
    if as_json:
        _print_json(result.as_dict())
        return
    table = rate_table("step", f"rescue curve of {run_id}")
    for point in result.located.curve:
        mark = ""
        if point.step == result.decisive_step:
            mark = " <- decisive"
        elif result.located.plateau and point.step in range(
            result.located.plateau[0], result.located.plateau[1] + 1
        ):
            mark = " <- plateau"
        label = f"{point.step}{mark}"
        table.add_row(*rate_cells(label, point.forks, point.rescued, point.interval))
    console.print(table)
    show_outcome(result.summary, result.session)
