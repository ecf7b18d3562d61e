"""Commands on the failure library: failures, labels, regression sets, metrics, rebuild."""

from typing import Annotated

import typer
from rich.table import Table

from ..errors import SteplogError
from ._shared import (
    DbOption,
    FailureGrouping,
    FailureSort,
    FailureStatus,
    JsonOption,
    ScenarioFilterOption,
    _opened,
    _print_json,
    _typer,
    app,
    console,
    description_column,
    err_console,
    styled,
)

# --- failures, labels, regression sets, metrics -------------------------------------------


@app.command("failures")
def failures_cmd(
    db: DbOption = None,
    scenario: ScenarioFilterOption = None,
    model_version: Annotated[
        str | None, typer.Option(help="Only failures this version produced.")
    ] = None,
    status: Annotated[
        FailureStatus | None, typer.Option(help="Only signatures in this state.")
    ] = None,
    label: Annotated[str | None, typer.Option(help="Only signatures with this label.")] = None,
    search: Annotated[str | None, typer.Option(help="Text in message, step or type.")] = None,
    sort: Annotated[FailureSort, typer.Option(help="Order of the signatures.")] = "count",
    group_by: Annotated[
        FailureGrouping | None, typer.Option(help="A distribution of failed runs instead.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most N signatures.")] = 30,
    offset: Annotated[int, typer.Option(min=0, help="Skip the first N (paging).")] = 0,
    as_json: JsonOption = False,
) -> None:
    """The failure-sample library: failed runs grouped by signature, most frequent first."""
    from ..projections.queries import distributions, list_failures, refresh

    with _opened(db) as store:
        refresh(store)
        if group_by is not None:
            found = distributions(store, scenario=scenario, model_version=model_version)
            counts = found.by_step if group_by == "step" else found.by_error_type
            if as_json:
                _print_json({"group_by": group_by, "failed_runs": counts})
                return
            table = Table(group_by, "failed runs", "share", box=None)
            total = sum(counts.values()) or 1
            for key, count in counts.items():
                table.add_row(key, str(count), f"{count / total:.0%}")
            console.print(table)
            return
        views = list_failures(
            store,
            scenario=scenario,
            model_version=model_version,
            status=status,
            label=label,
            search=search,
            sort=sort,
            limit=limit + 1,  # one more tells whether there is a next page
            offset=offset,
        )
    views, more = views[:limit], len(views) > limit
    next_offset = offset + limit if more else None
    if as_json:
        _print_json(
            {
                "signatures": [v.as_dict() for v in views],
                "limit": limit,
                "offset": offset,
                "next_offset": next_offset,
            }
        )
        return
    table = Table(
        "signature",
        "scenario",
        "step",
        "error",
        "message",
        "runs",
        "by version",
        "status",
        "labels",
        box=None,
    )
    for v in views:
        table.add_row(
            v.signature,
            v.scenario,
            v.step,
            v.error_type,
            v.message if len(v.message) <= 60 else v.message[:57] + "...",
            str(v.count),
            ", ".join(f"{k}:{n}" for k, n in v.counts_by_version.items()),
            v.status,
            ", ".join(sorted({item["label"] for item in v.labels})),
        )
    console.print(table)
    if next_offset is not None:
        console.print(f"more: --offset {next_offset}", highlight=False)


@app.command("failure")
def failure_cmd(
    signature: Annotated[str, typer.Argument(help="A signature (or a 6+ character prefix).")],
    db: DbOption = None,
    samples: Annotated[int, typer.Option(min=1, max=10_000, help="Sample runs to list.")] = 10,
    as_json: JsonOption = False,
) -> None:
    """One failure signature: counts per version, labels, regression sets and sample runs."""
    from ..projections.queries import get_failure, list_runs, refresh

    with _opened(db) as store:
        refresh(store)
        view = get_failure(store, signature)
        runs = list_runs(store, signature=view.signature, limit=samples)
    if as_json:
        _print_json({**view.as_dict(), "samples": [r.model_dump() for r in runs]})
        return
    console.print(
        styled(
            (view.signature, "bold"),
            f"  {view.scenario} / {view.step} / {view.error_type}  [{view.status}]\n"
            f"{view.message}\n{view.count} run(s): "
            + ", ".join(f"{k} {n}" for k, n in view.counts_by_version.items())
            + f"\nfirst seen {view.first_seen_at:%Y-%m-%d %H:%M}, last seen "
            f"{view.last_seen_at:%Y-%m-%d %H:%M}",
        ),
        highlight=False,
    )
    for item in view.labels:
        console.print(
            f"label {item['label']!r}: {item.get('note') or ''}", highlight=False, markup=False
        )
    if view.regression_sets:
        console.print("regression sets: " + ", ".join(view.regression_sets), highlight=False)
    table = Table("run", "version", "instance", "seed", "step", "ended", box=None)
    for r in runs:
        ended = r.ended_at.strftime("%Y-%m-%d %H:%M:%S") if r.ended_at else ""
        table.add_row(
            r.run_id,
            r.model_version,
            r.task_instance_id or "",
            str(r.seed),
            r.failed_step or "",
            ended,
        )
    console.print(table)


@app.command("label")
def label_cmd(
    target: Annotated[str, typer.Argument(help="A failed run id or a failure signature.")],
    label: Annotated[str, typer.Option(help="The label; 'fixed' marks the signature fixed.")],
    note: Annotated[str | None, typer.Option(help="A note kept with the label.")] = None,
    by: Annotated[str | None, typer.Option(help="Who labels (recorded).")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Label a failure. A signature labelled 'fixed' that fails again becomes 'regressed'."""
    from ..annotations import label as add_label

    with _opened(db) as store:
        signature = add_label(store, target, label=label, note=note, by=by)
    if as_json:
        _print_json({"target": target, "signature": signature, "label": label, "note": note})
        return
    console.print(f"labelled {signature} {label!r}", highlight=False)


regression_app = _typer("Regression sets: failed runs promoted for replay after every change.")
app.add_typer(regression_app, name="regression-set")


RegressionSetArgument = Annotated[str, typer.Argument(help="The regression set.")]


@regression_app.command("add")
def regression_add(
    name: RegressionSetArgument,
    runs: Annotated[list[str], typer.Argument(help="Failed run ids.")],
    note: Annotated[str | None, typer.Option(help="Why they belong there.")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add failed runs to a regression set."""
    from ..annotations import add_to_regression_set

    with _opened(db) as store:
        added = add_to_regression_set(store, name, runs, note=note)
    if as_json:
        _print_json({"set": name, "added": added, "runs": runs})
        return
    console.print(f"added {added} run(s) to {name!r}", highlight=False)


@regression_app.command("list")
def regression_list(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Regression sets and their sizes."""
    from ..projections.queries import refresh, regression_sets

    with _opened(db) as store:
        refresh(store)
        sets = regression_sets(store)
    if as_json:
        _print_json({"sets": [{"name": s.name, "runs": s.runs} for s in sets]})
        return
    for size in sets:
        console.print(f"{size.name}  {size.runs} run(s)", highlight=False)


@regression_app.command("show")
def regression_show(
    name: RegressionSetArgument,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """The runs in a regression set."""
    from ..projections.queries import refresh, regression_set

    with _opened(db) as store:
        refresh(store)
        members = regression_set(store, name)
    if not members:
        raise SteplogError(f"no regression set {name!r} (or it is empty)")
    if as_json:
        _print_json({"set": name, "runs": [m.model_dump() for m in members]})
        return
    table = Table(
        "run", "scenario", "version", "instance", "seed", "failed step", "error", box=None
    )
    for m in members:
        table.add_row(
            m.run_id,
            m.scenario or "",
            m.model_version or "",
            m.task_instance_id or "",
            str(m.seed),
            m.failed_step or "",
            m.error_type or "",
        )
    console.print(table)


@app.command("metrics")
def metrics_cmd(
    db: DbOption = None,
    scenario: ScenarioFilterOption = None,
    by_task_type: Annotated[
        bool, typer.Option("--by-task-type/--no-task-type", help="Split by task type.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Process metrics per scenario and model version: completion, first-step accuracy, retries."""
    from ..projections.queries import metrics, refresh

    with _opened(db) as store:
        refresh(store)
        found = metrics(store, scenario=scenario, by_task_type=by_task_type)
    if as_json:
        _print_json({"metrics": [m.as_dict() for m in found]})
        return

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    table = Table(
        "scenario",
        "version",
        "task type",
        "runs",
        "completion",
        "first step",
        "mid-run correction",
        "retries/run",
        "tokens/run",
        "cost/run",
        box=None,
    )
    for m in found:
        table.add_row(
            m.scenario,
            m.model_version,
            m.task_type or "",
            str(m.runs),
            pct(m.completion_rate),
            pct(m.first_step_accuracy),
            pct(m.mid_run_correction_rate),
            "-" if m.mean_retries is None else f"{m.mean_retries:.2f}",
            "-" if m.mean_tokens is None else f"{m.mean_tokens:,.0f}",
            "-" if m.mean_cost_usd is None else f"${m.mean_cost_usd:.4f}",
        )
    console.print(table)


@app.command("rebuild")
def rebuild_cmd(
    db: DbOption = None,
    projection: Annotated[
        str, typer.Option(help="Which projection: library or search.")
    ] = "library",
    as_json: JsonOption = False,
) -> None:
    """Rebuild read models from position 0 into shadow tables, then swap them in."""
    from rich.progress import BarColumn, Progress, TimeRemainingColumn

    from ..projections.library import NAME, LibraryProjection

    if projection not in (NAME, "search"):
        raise SteplogError(f"unknown projection {projection!r}; projections: {NAME}, search")
    if projection == "search":  # the search index (steplog.search): emptied, then caught up
        from ..search import SearchIndex

        with _opened(db) as store:
            folded = SearchIndex(store).rebuild()
    else:
        with (
            _opened(db) as store,
            Progress(
                description_column(),
                BarColumn(),
                "{task.completed:,}/{task.total:,} events",
                TimeRemainingColumn(),
                console=err_console,
                disable=as_json,
            ) as progress,
        ):
            task = progress.add_task(f"rebuilding {projection}", total=store.last_position())
            folded = LibraryProjection(store).rebuild(
                progress=lambda done, total: progress.update(task, completed=done, total=total)
            )
    if as_json:
        _print_json({"projection": projection, "events": folded})
        return
    console.print(f"rebuilt {projection} from {folded:,} events", highlight=False)
