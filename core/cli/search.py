"""``steplog search``: runs whose inputs, outputs, errors or tool arguments match a query."""

from datetime import UTC, datetime
from typing import Annotated

import typer

from ..errors import SteplogError
from ._shared import (
    DbOption,
    JsonOption,
    RunStatus,
    ScenarioFilterOption,
    _opened,
    _print_json,
    app,
    console,
)


def _moment(option: str, value: str | None) -> datetime | None:
    """An ISO 8601 date or time (UTC unless it says otherwise), or one ``error:`` line."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise SteplogError(
            f"{option} {value!r} is not a date or time (e.g. 2026-12-01 or 2026-12-01T08:00)"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


@app.command("search")
def search_cmd(
    words: Annotated[
        list[str],
        typer.Argument(
            metavar="QUERY...", help='Words and "quoted phrases", all must match; word* a prefix.'
        ),
    ],
    db: DbOption = None,
    version: Annotated[str | None, typer.Option(help="Only runs of this model version.")] = None,
    scenario: ScenarioFilterOption = None,
    status: Annotated[RunStatus | None, typer.Option(help="Only runs in this state.")] = None,
    since: Annotated[
        str | None, typer.Option(help="Only runs started at or after (ISO date or time, UTC).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Only runs started before (ISO date or time, UTC).")
    ] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE a run carries (repeatable): user_id=u-7, metadata.k=v."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many runs.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """Search across runs: inputs, outputs, errors, tool arguments and results, model calls.

    One line per run, newest first: where it matched first, and a snippet with the matched
    words between « and ». The index is a projection, caught up before every search
    (``steplog rebuild --projection search`` folds it again from the log).
    """
    from ..search import search, tag_filters

    query = " ".join(words)
    wanted = tag_filters(tag or [])
    start, end = _moment("--since", since), _moment("--until", until)
    with _opened(db) as store:
        hits = search(
            store, query, version=version, scenario=scenario, status=status,
            since=start, until=end, tags=wanted, limit=limit,
        )  # fmt: skip
    if as_json:
        _print_json({"query": query, "runs": [hit.as_dict() for hit in hits]})
        return
    if not hits:
        console.print("no run matches", highlight=False)
        return
    for hit in hits:
        console.print(
            f"{hit.run_id}  {hit.model_version}  {hit.status}  {hit.place}"
            f"{'' if hit.matches == 1 else f' (+{hit.matches - 1} more)'}\n    {hit.snippet}",
            highlight=False,
            soft_wrap=True,
        )
