"""``steplog attribute --signature SIG | --set NAME``: attribution over many failed runs."""

from typing import TYPE_CHECKING

from rich.table import Table

from ._shared import _opened, _print_json, console, description_column, err_console

if TYPE_CHECKING:
    from ..attribution.batch import Batch, SignatureHistogram

BAR = 30


def attribute_batch(
    signature: str | None,
    set_name: str | None,
    rescuer: str,
    forks: int,
    scan: bool,
    limit: int,
    db: str | None,
    as_json: bool,
) -> None:
    """Attribute every run of ``signature`` or ``set_name``, with a progress bar on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from ..attribution.batch import Batch, attribute_many, runs_of_set, runs_of_signature

    with _opened(db) as store:
        if signature is not None:
            runs = runs_of_signature(store, signature, limit=limit)
            source = {"signature": runs[0].signature or signature}
            where = f"signature {signature}"
        else:
            assert set_name is not None
            runs = runs_of_set(store, set_name)
            source = {"set": set_name}
            where = f"regression set {set_name!r}"
        columns = (description_column(), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(
            *columns, console=err_console, transient=True, disable=not err_console.is_terminal
        ) as bar:
            task = bar.add_task(f"attributing onto {rescuer}", total=len(runs))

            def advance(done: int, total: int, run_id: str) -> None:
                label = f"attributing {run_id}" if run_id else "done"
                bar.update(task, completed=done, total=total, description=label)

            results = attribute_many(
                store, runs, rescuer=rescuer, forks=forks, scan=scan, where=where, progress=advance
            )
    batch = Batch(source, rescuer, forks, runs, results)
    if as_json:
        _print_json(batch.as_dict())
        return
    _print_batch(batch)


def _print_batch(batch: "Batch") -> None:
    table = Table("run", "failure step", "verdict", "decisive", "forks", "reused", box=None)
    for found in batch.results:
        located = found.located
        where = (
            str(located.decisive_step)
            if located.decisive_step is not None
            else (f"{located.plateau[0]}..{located.plateau[1]}" if located.plateau else "-")
        )
        table.add_row(
            found.run_id,
            str(found.failure_step),
            found.verdict.replace("_", " "),
            where,
            str(located.forks_spent),
            str(found.forks_reused),
        )
    console.print(table)
    for group in batch.histograms:
        console.print(_histogram(group))
    console.print(batch.summary, highlight=False, markup=False)


def _histogram(group: "SignatureHistogram") -> Table:
    """Decisive steps against failure steps, one row per step, as bars."""
    signature = str(group.signature or "(no signature)")[:12]
    title = (
        f"{signature} {group.failure}: {group.runs} run(s), {group.decisive} decisive "
        f"({group.decided_before_failure} before the failure step), {group.plateau} "
        f"plateau, {group.not_rescuable} not rescuable"
    )
    table = Table(
        "step", "decisive", "", "failure", "", title=title, box=None, title_justify="left"
    )
    top = max([1, *(max(s.decisive, s.failure) for s in group.steps)])
    for row in group.steps:
        table.add_row(
            str(row.step),
            str(row.decisive),
            "#" * round(BAR * row.decisive / top),
            str(row.failure),
            "#" * round(BAR * row.failure / top),
        )
    return table
