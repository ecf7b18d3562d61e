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
    from ..modes import check_bucket, mode_report, modes_report

    check_bucket(period)
    if mode is not None:
        with _opened(db) as store:
            one = mode_report(
                store, mode, include_completed=every_run, period=period, rebuild=rebuild
            )
        if as_json:
            _print_json(one.model_dump())
            return
        from ._shared import console

        row = one.model_dump()
        for key in ("id", "name", "size", "defining_features", "by_version", "steps"):
            console.print(f"{key}: {row[key]}", highlight=False)
        console.print(f"signatures: {one.signatures}", highlight=False)
        console.print(f"exemplars: {', '.join(one.exemplars)}", highlight=False)
        from ..modes import ModeTrend
        from ._modes_print import print_trend

        trend = ModeTrend(
            bucket=one.trend.bucket,
            periods=list(one.trend.by_period),
            versions=list(one.trend.by_version),
            by_period={one.id: one.trend.by_period},
            by_version={one.id: one.trend.by_version},
        )
        print_trend([one], trend, 1)
        return
    with _opened(db) as store:
        report = modes_report(store, include_completed=every_run, period=period, rebuild=rebuild)
    if as_json:
        _print_json(report.model_dump(exclude={"members"}))
        return
    from ._modes_print import print_modes, print_trend

    print_modes(report.modes, report.runs, limit)
    print_trend(report.modes, report.trend, limit)
