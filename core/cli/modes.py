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
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Failure modes: failed runs clustered by how they failed, largest first."""
    from ..errors import SteplogError
    from ..modes import mode_rows, modes_of

    with _opened(db) as store:
        modes = modes_of(store, include_completed=every_run, rebuild=rebuild)
    rows = mode_rows(modes)
    if mode is not None:
        found = modes.mode(mode)
        if found is None:
            raise SteplogError(f"no single mode starts with {mode!r}; see `steplog modes`")
        runs = sorted(r for r, m in modes.assignment.items() if m == found.id)
        row = next(r for r in rows if r["id"] == found.id)
        if as_json:
            _print_json({**row, "runs": runs})
            return
        from ._shared import console

        for key in ("id", "name", "size", "defining_features", "by_version", "steps"):
            console.print(f"{key}: {row[key]}", highlight=False)
        console.print(f"signatures: {row['signatures']}", highlight=False)
        console.print(f"exemplars: {', '.join(row['exemplars'])}", highlight=False)
        return
    if as_json:
        _print_json({"runs": len(modes.assignment), "modes": rows})
        return
    from ._modes_print import print_modes

    print_modes(rows, len(modes.assignment), limit)
