"""``steplog modes``: failed runs clustered into failure modes (no LLM)."""

from typing import Annotated

import typer

from ._shared import DbOption, JsonOption, _opened, _print_json, app

SHOWN = 15


@app.command("modes")
def modes_cmd(
    every_run: Annotated[
        bool,
        typer.Option(
            "--all", help="Cluster every finished run, completed ones too (not only failed)."
        ),
    ] = False,
    limit: Annotated[
        int, typer.Option(min=1, max=10_000, help="Show the N largest modes (--json: every one).")
    ] = SHOWN,
    mode: Annotated[
        str | None, typer.Option(help="One mode (an id or a prefix): its runs and features.")
    ] = None,
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Recluster instead of assigning new runs.")
    ] = False,
    period: Annotated[
        str | None,
        typer.Option(help="Trend period: hour, day, week or month (default: by the runs' span)."),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Failure modes: failed runs clustered by how they failed, largest first."""
    from ..errors import SteplogError
    from ..modes import check_bucket, mode_rows, mode_trend, modes_and_runs

    check_bucket(period)
    with _opened(db) as store:
        modes, runs = modes_and_runs(store, include_completed=every_run, rebuild=rebuild)
    rows = mode_rows(modes)
    trend = mode_trend(modes, runs, bucket=period)
    if mode is not None:
        found = modes.mode(mode)
        if found is None:
            raise SteplogError(f"no single mode starts with {mode!r}; see `steplog modes`")
        row = next(r for r in rows if r["id"] == found.id)
        members = sorted(r for r, m in modes.assignment.items() if m == found.id)
        mine = {
            "bucket": trend["bucket"],
            "by_period": trend["by_period"][found.id],
            "by_version": trend["by_version"][found.id],
        }
        if as_json:
            _print_json({**row, "runs": members, "trend": mine})
            return
        from ._shared import console

        for key in ("id", "name", "size", "defining_features", "by_version", "steps"):
            console.print(f"{key}: {row[key]}", highlight=False)
        console.print(f"signatures: {row['signatures']}", highlight=False)
        console.print(f"exemplars: {', '.join(row['exemplars'])}", highlight=False)
        from ._modes_print import print_trend

        print_trend([row], trend, 1)
        return
    if as_json:
        _print_json({"runs": len(modes.assignment), "modes": rows, "trend": trend})
        return
    from ._modes_print import print_modes, print_trend

    print_modes(rows, len(modes.assignment), limit)
    print_trend(rows, trend, limit)
