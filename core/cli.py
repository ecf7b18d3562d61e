"""The ``steplog`` command line: every capability reachable from the shell, ``--json`` for scripts.

User mistakes (bad input, a database that cannot be reached, a version conflict) print one clear
``error:`` line and exit 1; usage errors exit 2. Nothing here prints a traceback for them.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn
from rich.table import Table
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError
from typer.core import TyperGroup

from .database import (
    create_engine_for,
    current_revision,
    downgrade,
    head_revision,
    redact,
    resolve_url,
    upgrade,
)
from .errors import SteplogError
from .ingest.jsonl import import_jsonl
from .store import EventStore, StoredEvent

console = Console() if sys.stdout.isatty() else Console(width=160)  # no wrapping when piped
err_console = Console(stderr=True, soft_wrap=True)  # one line per message, grep-able


class _Group(TyperGroup):
    """Turns steplog's errors into one clean ``error:`` line and exit code 1."""

    def invoke(self, ctx: Any) -> Any:  # a click Context (typer vendors its own click)
        try:
            return super().invoke(ctx)
        except SteplogError as exc:
            _print_error(str(exc))
        except DBAPIError as exc:  # the database failed mid-command (connection lost, disk full)
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
            _print_error(f"database error: {reason}")


def _print_error(message: str) -> None:
    err_console.print("[bold red]error:[/]", message, highlight=False)
    raise typer.Exit(1)


def _typer(help_text: str) -> typer.Typer:
    return typer.Typer(
        cls=_Group, help=help_text, no_args_is_help=True, pretty_exceptions_enable=False
    )


app = _typer("steplog: find out why long-horizon agent runs fail.")
db_app = _typer("Database schema: upgrade, downgrade, show the current revision.")
events_app = _typer("The raw event log: append JSONL, tail events.")
bench_app = _typer("Benchmarks, reported as ratios against baselines measured in the same run.")
app.add_typer(db_app, name="db")
app.add_typer(events_app, name="events")
quarantine_app = _typer("Input that could not be stored, kept verbatim with the reason.")
app.add_typer(bench_app, name="bench")
app.add_typer(quarantine_app, name="quarantine")

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="STEPLOG_DATABASE_URL",
        help="Database URL (sqlite:///path, postgresql://...) or SQLite file path. "
        "Default: ~/.steplog/steplog.db (STEPLOG_HOME overrides the folder).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _print_json(data: Any) -> None:
    """Strict JSON: NaN and infinities (an undefined statistic) become null."""
    sys.stdout.write(json.dumps(_finite(data), default=str, allow_nan=False) + "\n")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


@contextmanager
def _opened(db: str | None) -> Iterator[EventStore]:
    """The store at ``db``, closed afterwards; an explicit ``--db`` must already exist."""
    store = EventStore.open(db, must_exist=db is not None)
    try:
        yield store
    finally:
        store.close()


# --- db --------------------------------------------------------------------------------------


@contextmanager
def _engine(db: str | None) -> Iterator[Engine]:
    engine = create_engine_for(resolve_url(db))
    try:
        yield engine
    finally:
        engine.dispose()


@db_app.command("upgrade")
def db_upgrade(
    db: DbOption = None,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
) -> None:
    """Migrate the database schema up to REVISION (default: head)."""
    with _engine(db) as engine:
        before = current_revision(engine)
        upgrade(engine, revision)
        after = current_revision(engine)
    console.print(f"{redact(str(engine.url))}: {before or 'empty'} -> {after}", highlight=False)


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision; 'base' drops all tables.")],
    db: DbOption = None,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm: this can drop data.")] = False,
) -> None:
    """Migrate the database schema down to REVISION. Destroys data the older schema lacks."""
    if not yes:
        raise SteplogError("downgrading can drop stored events; repeat with --yes to confirm")
    with _engine(db) as engine:
        downgrade(engine, revision)
        after = current_revision(engine)
    console.print(f"{redact(str(engine.url))}: now at {after or 'base (empty)'}", highlight=False)


@db_app.command("current")
def db_current(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Show the database's schema revision and the head this steplog needs."""
    with _engine(db) as engine:
        current = current_revision(engine)
    head = head_revision()
    info: dict[str, Any] = {"url": redact(str(engine.url)), "current": current, "head": head}
    info["up_to_date"] = current == head
    if as_json:
        _print_json(info)
        return
    state = "up to date" if current == head else "needs `steplog db upgrade`"
    console.print(f"{info['url']}: revision {current or 'none'} (head {head}, {state})")


# --- events ----------------------------------------------------------------------------------


@events_app.command("append")
def events_append(
    file: Annotated[
        Path, typer.Argument(help="JSONL file: one event per line.", exists=True, dir_okay=False)
    ],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Append the events of a JSONL file; bad lines are quarantined, good ones still stored.

    Exit code 1 when any line was quarantined. Re-running a file whose lines carry event_id
    adds nothing; lines without one get new ids each time.
    """
    store = EventStore.open(db)
    try:
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=err_console,
            transient=True,
            disable=as_json or not err_console.is_terminal,
        ) as progress:
            task = progress.add_task(f"appending {file.name}", total=file.stat().st_size)
            report = import_jsonl(
                store, file, on_progress=lambda done: progress.update(task, completed=done)
            )
    finally:
        store.close()
    if as_json:
        _print_json(report.as_dict())
    else:
        console.print(
            f"appended {report.appended}, already stored {report.already_stored}, "
            f"quarantined {len(report.quarantined)}",
            highlight=False,
        )
    for bad in report.quarantined[:20]:
        err_console.print(f"{file}:{bad.line_no}: {bad.reason}", highlight=False, markup=False)
    if len(report.quarantined) > 20:
        err_console.print(
            f"... and {len(report.quarantined) - 20} more: steplog quarantine list "
            f"--source 'jsonl:{file}'",
            highlight=False,
        )
    if report.quarantined:
        raise typer.Exit(1)


@events_app.command("tail")
def events_tail(
    db: DbOption = None,
    after: Annotated[
        int | None, typer.Option(min=0, max=2**62, help="Show events after this position.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many events.")] = 20,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = (
        False
    ),
    as_json: JsonOption = False,
) -> None:
    """Print the newest events (or those after --after), oldest first."""
    store = EventStore.open(db, must_exist=db is not None)
    try:
        cursor = max(0, store.last_position() - limit) if after is None else after
        while True:
            batch = list(store.read_all(cursor, None if follow else limit))
            if batch:
                _print_events(batch, as_json)
                cursor = batch[-1].position
            if not follow:
                return
            time.sleep(0.5)
    except KeyboardInterrupt:
        return
    finally:
        store.close()


def _print_events(events: list[StoredEvent], as_json: bool) -> None:
    if as_json:
        sys.stdout.write("".join(json.dumps(e.to_json()) + "\n" for e in events))
        sys.stdout.flush()
        return
    table = Table("pos", "run", "seq", "type", "recorded (UTC)", "payload", box=None)
    for e in events:
        payload = json.dumps(e.payload, separators=(",", ":"))
        table.add_row(
            str(e.position),
            e.run_id,
            str(e.seq),
            e.type,
            e.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
            payload if len(payload) <= 80 else payload[:77] + "...",
        )
    console.print(table)


# --- failures, labels, regression sets, metrics -------------------------------------------


@app.command("failures")
def failures_cmd(
    db: DbOption = None,
    scenario: Annotated[str | None, typer.Option(help="Only this scenario.")] = None,
    model_version: Annotated[
        str | None, typer.Option(help="Only failures this version produced.")
    ] = None,
    status: Annotated[str | None, typer.Option(help="new, triaged, fixed or regressed.")] = None,
    label: Annotated[str | None, typer.Option(help="Only signatures with this label.")] = None,
    search: Annotated[str | None, typer.Option(help="Text in message, step or type.")] = None,
    sort: Annotated[str, typer.Option(help="count, last_seen or first_seen.")] = "count",
    group_by: Annotated[
        str | None, typer.Option(help="Distribution instead: step or error-type.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 30,
    as_json: JsonOption = False,
) -> None:
    """The failure-sample library: failed runs grouped by signature, most frequent first."""
    from .projections.queries import distributions, list_failures, refresh

    if sort not in ("count", "last_seen", "first_seen"):
        raise SteplogError(f"--sort must be count, last_seen or first_seen, not {sort!r}")
    if group_by not in (None, "step", "error-type"):
        raise SteplogError(f"--group-by must be step or error-type, not {group_by!r}")
    with _opened(db) as store:
        refresh(store)
        if group_by is not None:
            found = distributions(store, scenario=scenario, model_version=model_version)
            counts = found["step" if group_by == "step" else "error_type"]
            if as_json:
                _print_json(counts)
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
            sort=sort,  # type: ignore[arg-type]  # checked against SortKey above
            limit=limit,
        )
    if as_json:
        _print_json([v.as_dict() for v in views])
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


@app.command("failure")
def failure_cmd(
    signature: Annotated[str, typer.Argument(help="A signature (or a 6+ character prefix).")],
    db: DbOption = None,
    samples: Annotated[int, typer.Option(min=1, max=10_000, help="Sample runs to list.")] = 10,
    as_json: JsonOption = False,
) -> None:
    """One failure signature: counts per version, labels, regression sets and sample runs."""
    from .projections.queries import get_failure, list_runs, refresh

    with _opened(db) as store:
        refresh(store)
        view = get_failure(store, signature)
        runs = list_runs(store, signature=view.signature, limit=samples)
    if as_json:
        _print_json({**view.as_dict(), "samples": runs})
        return
    console.print(
        f"[bold]{view.signature}[/]  {view.scenario} / {view.step} / {view.error_type}  "
        f"[{view.status}]\n{view.message}\n"
        f"{view.count} run(s): "
        + ", ".join(f"{k} {n}" for k, n in view.counts_by_version.items())
        + f"\nfirst seen {view.first_seen_at:%Y-%m-%d %H:%M}, last seen "
        f"{view.last_seen_at:%Y-%m-%d %H:%M}",
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
        ended = r["ended_at"].strftime("%Y-%m-%d %H:%M:%S") if r["ended_at"] else ""
        table.add_row(
            r["run_id"],
            r["model_version"],
            r["task_instance_id"] or "",
            str(r["seed"]),
            r["failed_step"] or "",
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
) -> None:
    """Label a failure. A signature labelled 'fixed' that fails again becomes 'regressed'."""
    from .annotations import label as add_label

    with _opened(db) as store:
        signature = add_label(store, target, label=label, note=note, by=by)
    console.print(f"labelled {signature} {label!r}", highlight=False)


regression_app = _typer("Regression sets: failed runs promoted for replay after every change.")
app.add_typer(regression_app, name="regression-set")


@regression_app.command("add")
def regression_add(
    name: Annotated[str, typer.Argument(help="The regression set.")],
    runs: Annotated[list[str], typer.Argument(help="Failed run ids.")],
    note: Annotated[str | None, typer.Option(help="Why they belong there.")] = None,
    db: DbOption = None,
) -> None:
    """Add failed runs to a regression set."""
    from .annotations import add_to_regression_set

    with _opened(db) as store:
        added = add_to_regression_set(store, name, runs, note=note)
    console.print(f"added {added} run(s) to {name!r}", highlight=False)


@regression_app.command("list")
def regression_list(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Regression sets and their sizes."""
    from .projections.queries import refresh, regression_sets

    with _opened(db) as store:
        refresh(store)
        sets = regression_sets(store)
    if as_json:
        _print_json(sets)
        return
    for name, size in sets.items():
        console.print(f"{name}  {size} run(s)", highlight=False)


@regression_app.command("show")
def regression_show(
    name: Annotated[str, typer.Argument(help="The regression set.")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """The runs in a regression set."""
    from .projections.queries import refresh, regression_set

    with _opened(db) as store:
        refresh(store)
        members = regression_set(store, name)
    if not members:
        raise SteplogError(f"no regression set {name!r} (or it is empty)")
    if as_json:
        _print_json(members)
        return
    table = Table(
        "run", "scenario", "version", "instance", "seed", "failed step", "error", box=None
    )
    for m in members:
        table.add_row(
            m["run_id"],
            m["scenario"] or "",
            m["model_version"] or "",
            m["task_instance_id"] or "",
            str(m["seed"]),
            m["failed_step"] or "",
            m["error_type"] or "",
        )
    console.print(table)


@app.command("metrics")
def metrics_cmd(
    db: DbOption = None,
    scenario: Annotated[str | None, typer.Option(help="Only this scenario.")] = None,
    by_task_type: Annotated[
        bool, typer.Option("--by-task-type/--no-task-type", help="Split by task type.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Process metrics per scenario and model version (article 000 §6.3); see the README."""
    from .projections.queries import metrics, refresh

    with _opened(db) as store:
        refresh(store)
        found = metrics(store, scenario=scenario, by_task_type=by_task_type)
    if as_json:
        _print_json([m.as_dict() for m in found])
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
    projection: Annotated[str, typer.Option(help="Which projection.")] = "library",
) -> None:
    """Rebuild read models from position 0 into shadow tables, then swap them in."""
    from .projections.library import NAME, LibraryProjection

    if projection != NAME:
        raise SteplogError(f"unknown projection {projection!r}; projections: {NAME}")
    with (
        _opened(db) as store,
        Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            "{task.completed:,}/{task.total:,} events",
            TimeRemainingColumn(),
            console=err_console,
        ) as progress,
    ):
        task = progress.add_task(f"rebuilding {projection}", total=store.last_position())
        folded = LibraryProjection(store).rebuild(
            progress=lambda done, total: progress.update(task, completed=done, total=total)
        )
    console.print(f"rebuilt {projection} from {folded:,} events", highlight=False)


# --- replay ----------------------------------------------------------------------------------


@app.command("replay")
def replay_cmd(
    run_id: Annotated[str, typer.Argument(help="The run to replay.")],
    fork_at_step: Annotated[
        int | None, typer.Option(min=0, help="Serve the recording before step K, then go live.")
    ] = None,
    model_version: Annotated[
        str | None, typer.Option(help="With --fork-at-step: the version to continue on.")
    ] = None,
    import_module: Annotated[
        str | None,
        typer.Option("--import", help="Module that registers your agent (SDK runs)."),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay a run with its recorded responses (identical or not?), or fork it at a step."""
    from .replay import replay

    if import_module:
        import importlib

        try:
            importlib.import_module(import_module)
        except ImportError as exc:
            raise SteplogError(f"cannot import {import_module!r}: {exc}") from None

    with _opened(db) as store:
        result = replay(store, run_id, fork_at_step=fork_at_step, model_version=model_version)
    if as_json:
        _print_json(result.as_dict())
    else:
        console.print(
            f"{result.mode} replay of {result.original} -> {result.run_id}\n{result.summary}",
            highlight=False,
        )
        if result.first_difference:
            console.print(
                f"first difference: {json.dumps(result.first_difference)}",
                highlight=False,
                markup=False,
            )
    if result.divergence is not None or result.identical is False:
        raise typer.Exit(1)


@app.command("diff")
def diff_cmd(
    run_a: Annotated[str, typer.Argument(help="First run.")],
    run_b: Annotated[str, typer.Argument(help="Second run.")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compare two runs step by step and name their first divergence."""
    from .replay import diff_runs

    with _opened(db) as store:
        result = diff_runs(store, run_a, run_b)
    if as_json:
        _print_json(result)
        return
    a, b = result["a"], result["b"]
    console.print(
        f"A {a['run_id']} ({a['model_version']}, {a['status']}, retries {a['retries']}, "
        f"tokens {a['tokens']:,})\nB {b['run_id']} ({b['model_version']}, {b['status']}, "
        f"retries {b['retries']}, tokens {b['tokens']:,})",
        highlight=False,
    )
    first = result["first_difference"]
    console.print(
        "identical event streams"
        if result["identical"]
        else f"first divergence at event {first['seq']} (step {first['step_index']}, call "
        f"{first['call_index']}): {first['fields'] or 'different events'}",
        highlight=False,
        markup=False,
    )
    table = Table("#", "step", "A", "B", "", box=None)
    for row in result["steps"]:

        def cell(side: dict[str, Any] | None) -> str:
            return "-" if side is None else f"{side['status']} x{side['attempts']}"

        table.add_row(
            str(row["index"]),
            row["name"] or "",
            cell(row["a"]),
            cell(row["b"]),
            "" if row["same"] else "differs",
        )
    console.print(table)


@app.command("regress")
def regress_cmd(
    regression_set: Annotated[str, typer.Argument(help="The regression set.")],
    model_version: Annotated[str, typer.Option(help="The version to replay the samples on.")],
    mode: Annotated[str, typer.Option(help="fork (at the failed step) or rerun (whole run).")] = (
        "fork"
    ),
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay every sample of a regression set onto a model version: how many pass now?"""
    from .replay import regress

    with _opened(db) as store:
        result = regress(
            store,
            regression_set,
            model_version=model_version,
            mode=_choice("--mode", mode, ("fork", "rerun")),
        )
    if as_json:
        _print_json(result)
        return
    table = Table("original", "new run", "status", "fork step", box=None)
    for r in result["results"]:
        table.add_row(
            r["original"],
            r["run_id"],
            r["status"],
            "" if r["fork_step"] is None else str(r["fork_step"]),
        )
    console.print(table)
    console.print(result["verdict"], highlight=False)


# --- statistics ----------------------------------------------------------------------------

ConfidenceOption = Annotated[
    float, typer.Option(min=0.5, max=0.999, help="Confidence level of every interval.")
]


@app.command("compare")
def compare_cmd(
    baseline: Annotated[str, typer.Option(help="Baseline model version.")],
    candidate: Annotated[str, typer.Option(help="Candidate model version.")],
    scenario: Annotated[str | None, typer.Option(help="Only this scenario.")] = None,
    paired: Annotated[
        str, typer.Option(help="auto: pair runs of the same items when >= 10 exist; on; off.")
    ] = "auto",
    confidence: ConfidenceOption = 0.95,
    ci_method: Annotated[str, typer.Option(help="wilson, clopper-pearson or jeffreys.")] = "wilson",
    difference_method: Annotated[
        str, typer.Option(help="newcombe or miettinen-nurminen.")
    ] = "newcombe",
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Is the candidate really better? Intervals, tests, pairing, survival, power, verdict."""
    from .compare import compare

    with _opened(db) as store:
        report = compare(
            store,
            baseline=baseline,
            candidate=candidate,
            scenario=scenario,
            paired_mode=_choice("--paired", paired, ("auto", "on", "off")),
            confidence=confidence,
            ci_method=_choice("--ci-method", ci_method, ("wilson", "clopper-pearson", "jeffreys")),
            difference_method=_choice(
                "--difference-method", difference_method, ("newcombe", "miettinen-nurminen")
            ),
        )
    _print_report(report, as_json)


@app.command("compare-counts")
def compare_counts_cmd(
    baseline: Annotated[
        str | None, typer.Option(help="Baseline successes/runs, e.g. 38/50.")
    ] = None,
    candidate: Annotated[str | None, typer.Option(help="Candidate successes/runs.")] = None,
    paired_table: Annotated[
        str | None,
        typer.Option(help="Pairs: both,candidate_only,baseline_only,neither (e.g. 30,12,3,5)."),
    ] = None,
    confidence: ConfidenceOption = 0.95,
    as_json: JsonOption = False,
) -> None:
    """The comparison from counts alone, for results from elsewhere."""
    from .compare import compare_counts
    from .stats.paired import PairedTable

    table = None
    if paired_table is not None:
        parts = _ints("--paired-table", paired_table, ",", 4)
        table = PairedTable(*parts)
    report = compare_counts(
        baseline=_fraction("--baseline", baseline) if baseline else None,
        candidate=_fraction("--candidate", candidate) if candidate else None,
        paired_table=table,
        confidence=confidence,
    )
    _print_report(report, as_json)


def _choice(option: str, value: str, allowed: tuple[str, ...]) -> Any:
    if value not in allowed:
        raise SteplogError(f"{option} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def _ints(option: str, text: str, separator: str, count: int) -> list[int]:
    parts = text.split(separator)
    try:
        values = [int(part.strip()) for part in parts]
    except ValueError:
        values = []
    if len(values) != count or any(v < 0 for v in values):
        raise SteplogError(
            f"{option} wants {count} non-negative whole numbers separated by "
            f"{separator!r}, not {text!r}"
        )
    return values


def _fraction(option: str, text: str) -> tuple[int, int]:
    successes, runs = _ints(option, text, "/", 2)
    if runs == 0 or successes > runs:
        raise SteplogError(f"{option} {text!r}: need 0 <= successes <= runs and runs > 0")
    return successes, runs


def _print_report(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _print_json(report)
        return
    level = f"{report['confidence']:.0%}"

    def pct(value: float) -> str:
        return f"{value * 100:.1f}%"

    def pts(low: float, high: float) -> str:
        return f"[{low * 100:+.1f}, {high * 100:+.1f}] pts"

    table = Table("version", "runs", "completed", "rate", f"{level} interval", "method", box=None)
    for side in ("baseline", "candidate"):
        s = report[side]
        table.add_row(
            f"{side}: {s['model_version']}",
            str(s["runs"]),
            str(s["completed"]),
            pct(s["completion_rate"]),
            f"[{pct(s['ci'][0])}, {pct(s['ci'][1])}]",
            s["ci_method"],
        )
    console.print(table)
    d = report["difference"]
    console.print(
        f"independent: {d['estimate'] * 100:+.1f} {pts(*d['ci'])} ({d['method']}), "
        f"{d['test']} p={d['p_value']:.3g}",
        highlight=False,
    )
    p = report.get("paired")
    if p:
        console.print(
            f"paired on {p['pairs']} items: both {p['both']}, candidate only "
            f"{p['candidate_only']}, baseline only {p['baseline_only']}, neither {p['neither']}: "
            f"{p['estimate'] * 100:+.1f} {pts(*p['ci'])} ({p['method']}), {p['test']} "
            f"p={p['p_value']:.3g}",
            highlight=False,
        )
    for row in report.get("by_task_type") or []:
        console.print(
            f"  {row['task_type']}: {row['estimate'] * 100:+.1f} {pts(*row['ci'])}, "
            f"p={row['p_value']:.3g} (Holm {row['p_holm']:.3g}, BH {row['p_bh']:.3g}), "
            f"n={row['n']}",
            highlight=False,
        )
    metrics = report.get("metrics")
    if metrics:
        mt = Table("metric", "baseline", "candidate", box=None)
        for key in (
            "first_step_accuracy",
            "mid_run_correction_rate",
            "mean_retries",
            "mean_tokens",
            "mean_cost_usd",
        ):
            cells = []
            for side in ("baseline", "candidate"):
                m = metrics[side].get(key)
                cells.append(
                    "-"
                    if m is None
                    else f"{m['estimate']:.3g} [{m['ci'][0]:.3g}, {m['ci'][1]:.3g}]"
                )
            mt.add_row(key.replace("_", " "), *cells)
        console.print(mt)
    surv = report.get("survival")
    if surv:
        for side in ("baseline", "candidate"):
            s = surv[side]
            q, implied = s["step_success"], s["implied_completion"]
            trend = s["hazard_trend"]
            console.print(
                f"{side}: per-step success {q['estimate']:.3f} [{q['ci'][0]:.3f}, "
                f"{q['ci'][1]:.3f}] -> p^{implied['steps']} = {implied['estimate']:.2f}; "
                f"hazard trend z={trend['statistic']:.2f} p={trend['p_value']:.3g}",
                highlight=False,
            )
        console.print(f"logrank p={surv['logrank']['p_value']:.3g}", highlight=False)
    console.print(f"[bold]{report['verdict']}[/]", highlight=False)


# --- quarantine ----------------------------------------------------------------------------


@quarantine_app.command("list")
def quarantine_list(
    db: DbOption = None,
    source: Annotated[str | None, typer.Option(help="Only this source, e.g. jsonl:PATH.")] = None,
    after: Annotated[int, typer.Option(min=0, max=2**62, help="Records after this id.")] = 0,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
    as_json: JsonOption = False,
) -> None:
    """List quarantined input, oldest first."""
    with _opened(db) as store:
        records = store.quarantined(after_id=after, limit=limit, source=source)
    if as_json:
        sys.stdout.write("".join(json.dumps(r.to_json()) + "\n" for r in records))
        return
    table = Table("id", "received (UTC)", "source", "where", "reason", box=None)
    for r in records:
        table.add_row(
            str(r.id),
            r.received_at.strftime("%Y-%m-%d %H:%M:%S"),
            r.source,
            r.location,
            r.reason if len(r.reason) <= 100 else r.reason[:97] + "...",
        )
    console.print(table)


@quarantine_app.command("show")
def quarantine_show(
    record_id: Annotated[int, typer.Argument(min=1, max=2**62, help="Quarantine record id.")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one quarantined record: where it came from, why, and its raw content."""
    with _opened(db) as store:
        record = store.quarantined_input(record_id)
    if record is None:
        raise SteplogError(f"no quarantined record {record_id}")
    if as_json:
        _print_json(record.to_json())
        return
    console.print(f"#{record.id} from {record.source}, {record.location}", highlight=False)
    console.print(f"reason: {record.reason}", highlight=False, markup=False)
    console.print(record.raw, highlight=False, markup=False, soft_wrap=True)


# --- runs ----------------------------------------------------------------------------------

GateOption = Annotated[
    str | None,
    typer.Option(
        "--gate-policy",
        help="Override the scenario's gate policy: auto-approve, auto-reject or manual.",
    ),
]


@app.command("scenarios")
def scenarios_cmd(as_json: JsonOption = False) -> None:
    """List the registered scenarios, their task instances and model versions."""
    from .harness.scenario import registered_scenarios

    found = registered_scenarios()
    if as_json:
        _print_json(
            [
                {
                    "name": s.name,
                    "version": s.version,
                    "description": s.description,
                    "source": s.source,
                    "instances": len(s.all_instances()),
                    "steps": sorted({len(s.steps_for(i)) for i in s.all_instances()}),
                    "model_versions": list(s.models),
                    "demo_versions": s.versions_for_demo(),
                    "config": s.config.model_dump(exclude_none=True),
                }
                for s in found.values()
            ]
        )
        return
    table = Table("scenario", "instances", "steps", "model versions", "limits", "about")
    for s in found.values():
        steps = sorted({len(s.steps_for(i)) for i in s.all_instances()})
        table.add_row(
            s.name,
            str(len(s.all_instances())),
            ", ".join(map(str, steps)),
            ", ".join(s.models),
            ", ".join(f"{k}={v}" for k, v in s.config.model_dump(exclude_none=True).items()),
            s.description,
        )
    console.print(table)


def _gate(value: str | None) -> Any:
    if value not in (None, "auto-approve", "auto-reject", "manual"):
        raise SteplogError(
            f"--gate-policy must be auto-approve, auto-reject or manual, not {value!r}"
        )
    return value


def _execute_with_progress(
    db_url: str, plans: list[Any], workers: int, label: str, quiet: bool
) -> list[Any]:
    from .harness.batch import execute_all

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        "{task.completed}/{task.total}",
        TimeRemainingColumn(),
        console=err_console,
        disable=quiet,
    ) as progress:
        task = progress.add_task(label, total=len(plans))
        return execute_all(db_url, plans, workers=workers, on_done=lambda _: progress.advance(task))


@app.command("run")
def run_cmd(
    scenario: Annotated[str, typer.Argument(help="A registered scenario (steplog scenarios).")],
    model_version: Annotated[str, typer.Option("--model-version", "-m", help="Model version.")],
    runs: Annotated[int, typer.Option(min=1, max=1_000_000, help="How many runs.")] = 1,
    seed: Annotated[
        int | None, typer.Option(min=0, max=2**62, help="Seed of the first run (+1 per run).")
    ] = None,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Worker processes.")] = 1,
    instance: Annotated[str | None, typer.Option(help="Only this task instance.")] = None,
    gate_policy: GateOption = None,
    run_id: Annotated[
        str | None, typer.Option(help="Run id (with --runs 1); default: a new UUIDv7.")
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a scenario under a model version, recording every step."""
    if run_id is not None and runs != 1:
        raise SteplogError("--run-id names a single run; use it with --runs 1")
    from .harness.batch import plan_runs
    from .harness.scenario import get_scenario

    spec = get_scenario(scenario)
    plans = plan_runs(
        spec,
        model_version=model_version,
        runs=runs,
        seed=seed,
        instance_id=instance,
        gate_policy=_gate(gate_policy),
        run_id=run_id,
    )
    url = resolve_url(db)
    EventStore.open(url).close()  # create / migrate once, before any worker starts
    outcomes = _execute_with_progress(
        url, plans, workers, f"{scenario} on {model_version}", as_json or runs == 1
    )
    if as_json:
        _print_json([o.as_dict() for o in outcomes])
        return
    _print_outcomes(outcomes)


def _print_outcomes(outcomes: list[Any]) -> None:
    from collections import Counter

    statuses = Counter(o.status for o in outcomes)
    failures = Counter(o.failure_type for o in outcomes if o.failure_type)
    total = len(outcomes)
    completed = statuses.get("completed", 0)
    console.print(
        f"{total} run(s): "
        + ", ".join(f"{count} {status}" for status, count in statuses.most_common())
        + f" (completion {completed / total:.1%})",
        highlight=False,
    )
    if failures:
        console.print(
            "failure types: "
            + ", ".join(f"{kind} x{count}" for kind, count in failures.most_common()),
            highlight=False,
        )
    if total == 1:
        console.print(f"run id: {outcomes[0].run_id}  (steplog show {outcomes[0].run_id})")


@app.command("runs")
def runs_cmd(
    db: DbOption = None,
    scenario: Annotated[str | None, typer.Option(help="Only this scenario.")] = None,
    model_version: Annotated[str | None, typer.Option(help="Only this model version.")] = None,
    status: Annotated[str | None, typer.Option(help="completed, failed, aborted, ...")] = None,
    signature: Annotated[str | None, typer.Option(help="Only runs of this failure.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most N runs.")] = 50,
    offset: Annotated[int, typer.Option(min=0, help="Skip the newest N.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """List runs, newest first, with status, failure, retries and tokens."""
    from .projections.queries import list_runs, refresh

    with _opened(db) as store:
        refresh(store)
        rows = list_runs(
            store,
            scenario=scenario,
            model_version=model_version,
            status=status,
            signature=signature,
            limit=limit,
            offset=offset,
        )
    if as_json:
        _print_json(rows)
        return
    table = Table(
        "run",
        "scenario",
        "instance",
        "version",
        "status",
        "failure",
        "steps",
        "retries",
        "tokens",
        box=None,
    )
    for r in rows:
        failure = f"{r['error_type']} @ {r['failed_step']}" if r["error_type"] else ""
        table.add_row(
            r["run_id"],
            r["scenario"],
            r["task_instance_id"] or "",
            r["model_version"],
            r["status"],
            failure,
            f"{r['steps_done']}/{r['steps_planned']}",
            str(r["retries"]),
            f"{r['tokens']:,}",
        )
    console.print(table)


@app.command("show")
def show_cmd(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    at_step: Annotated[
        int | None, typer.Option(min=0, help="Time travel: the state after step K (0-based).")
    ] = None,
    at_position: Annotated[
        int | None, typer.Option(min=1, help="Time travel: the state as of this log position.")
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a run's state: status, current step, and every step's attempts and errors."""
    from .harness.runner import RunStateError
    from .projections.run_state import as_of

    with _opened(db) as store:
        events = store.read_run(run_id)
    if not events:
        raise RunStateError(f"no run {run_id!r} in {store.url}")
    state = as_of(events, step=at_step, position=at_position)
    if as_json:
        _print_json(state.as_dict())
        return
    last_step = state.steps[-1].index if state.steps else -1
    if at_step is not None and at_step > last_step:
        err_console.print(f"note: the run never got past step {last_step}; showing its end")
    _print_state(state)


def _print_state(state: Any) -> None:
    console.print(
        f"[bold]{state.run_id}[/]  {state.scenario} / {state.task_instance_id} on "
        f"{state.model_version} (seed {state.seed})\n"
        f"status [bold]{state.status}[/]  mode {state.run_mode}  retries {state.retries}  "
        f"tokens {state.input_tokens + state.output_tokens:,}  cost ${state.cost_usd:.4f}",
        highlight=False,
    )
    if state.failure_type:
        console.print(
            f"failure: {state.failure_type} at {state.failure_step}: {state.failure_message}",
            highlight=False,
            markup=False,
        )
    table = Table("#", "step", "status", "attempts", "last error", "output", box=None)
    for step in state.steps:
        table.add_row(
            str(step.index),
            step.name,
            step.status,
            str(step.attempts),
            step.last_error or "",
            step.output_summary or "",
        )
    console.print(table)


@app.command("approve")
def approve_cmd(
    run_id: Annotated[str, typer.Argument(help="A run waiting at a manual gate.")],
    step: Annotated[str, typer.Option(help="The step the run waits to start.")],
    reject: Annotated[bool, typer.Option("--reject", help="Reject instead of approve.")] = False,
    reason: Annotated[str | None, typer.Option(help="Why (recorded with the decision).")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Record a decision at a stage gate; the run then continues from its events."""
    from .harness.runner import approve

    with _opened(db) as store:
        state = approve(store, run_id, step=step, approved=not reject, reason=reason)
    if as_json:
        _print_json(state.as_dict())
        return
    _print_state(state)


@app.command("resume")
def resume_cmd(
    run_id: Annotated[str, typer.Argument(help="A run whose process died mid-way.")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Continue a run from its last completed step, rebuilt from its events."""
    from .harness.runner import resume

    with _opened(db) as store:
        state = resume(store, run_id)
    if as_json:
        _print_json(state.as_dict())
        return
    _print_state(state)


# --- overview --------------------------------------------------------------------------------


def _store_summary(store: EventStore) -> dict[str, Any]:
    return {
        "url": store.url,
        "last_position": store.last_position(),
        "runs": store.count_runs(),
        "quarantined": store.count_quarantined(),
    }


@app.command("info")
def info(db: DbOption = None, as_json: JsonOption = False) -> None:
    """What the store holds: location, events, runs, quarantined records."""
    with _opened(db) as store:
        summary = _store_summary(store)
    if as_json:
        _print_json(summary)
        return
    console.print(
        f"store {summary['url']}\n"
        f"  events      {summary['last_position']:,}\n"
        f"  runs        {summary['runs']:,}\n"
        f"  quarantined {summary['quarantined']:,}",
        highlight=False,
    )


@app.command("ui")
def ui_cmd(
    db: DbOption = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to serve on.")] = 8501,
    host: Annotated[str, typer.Option(help="Address to bind; loopback by default.")] = (
        "127.0.0.1"
    ),
) -> None:
    """Start the Streamlit app on this store (Ctrl-C stops it)."""
    import os
    import subprocess

    url = resolve_url(db)
    EventStore.open(url, must_exist=db is not None).close()  # fail fast, with a clear message
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(
            f"[bold yellow]warning:[/] serving on {host}: the UI has no authentication; anyone "
            "who can reach this address can read every run and trigger replays",
            highlight=False,
        )
    app_file = Path(__file__).resolve().parent.parent / "ui" / "app.py"
    if not app_file.exists():
        raise SteplogError(f"the UI is not installed next to steplog ({app_file} is missing)")
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app_file),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "minimal",
    ]
    console.print(f"steplog UI on http://{host}:{port} (store {redact(url)})", highlight=False)
    with suppress(KeyboardInterrupt):
        subprocess.run(command, env={**os.environ, "STEPLOG_DATABASE_URL": url}, check=False)


@app.command("demo")
def demo(
    db: DbOption = None,
    runs: Annotated[
        int, typer.Option(min=1, max=100_000, help="Runs per scenario and version.")
    ] = (100),
    workers: Annotated[int, typer.Option(min=1, max=64, help="Worker processes.")] = 1,
    no_ui: Annotated[bool, typer.Option("--no-ui", help="Seed only; do not start the UI.")] = (
        False
    ),
) -> None:
    """Seed every scenario under its two demo model versions (idempotent), then show them."""
    from .harness.batch import plan_runs
    from .harness.scenario import registered_scenarios

    url = resolve_url(db)
    EventStore.open(url).close()
    plans = [
        plan
        for spec in registered_scenarios().values()
        for version in spec.versions_for_demo()
        for plan in plan_runs(
            spec,
            model_version=version,
            runs=runs,
            seed=0,
            run_id_prefix=f"demo-{spec.name}-{version}-",
        )
    ]
    started = time.perf_counter()
    outcomes = _execute_with_progress(url, plans, workers, "seeding the demo", False)
    added = [o for o in outcomes if not o.skipped]
    console.print(
        f"demo: {len(added)} new run(s), {len(outcomes) - len(added)} already there "
        f"({time.perf_counter() - started:.1f} s)",
        highlight=False,
    )
    info(db=url, as_json=False)
    if not no_ui:
        ui_cmd(db=url)


# --- bench -----------------------------------------------------------------------------------


@bench_app.command("append")
def bench_append(
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Also measure this PostgreSQL database (in a scratch schema, dropped after).",
        ),
    ] = None,
    events: Annotated[int, typer.Option(min=1000, help="Events per measurement.")] = 20_000,
    repeat: Annotated[int, typer.Option(min=1, help="Measurements per case; median kept.")] = 3,
    as_json: JsonOption = False,
) -> None:
    """Append throughput for batches of 1, 100 and 1,000 against raw baselines."""
    from .bench.append import BenchCase, run_append_benchmark

    cases = run_append_benchmark(
        postgres_url=resolve_url(db) if db else None,
        events=events,
        repeat=repeat,
        progress=None if as_json else err_console,
    )
    if as_json:
        _print_json([case.as_dict() for case in cases])
        return
    table = Table(
        "engine",
        "batch",
        "steplog",
        "sqlite3",
        "eventsourcing",
        "vs sqlite3",
        "vs eventsourcing",
        "targets",
        title="append, events/s (median of repeats)",
    )

    def rate(case: BenchCase, name: str) -> str:
        value = case.events_per_second.get(name)
        return "-" if value is None else f"{value:,.0f}"

    def ratio(case: BenchCase, name: str) -> str:
        value = case.ratio(name)
        return "-" if value is None else f"{value:.2f}x"

    for case in cases:
        table.add_row(
            case.engine,
            f"{case.batch_size:,}",
            rate(case, "steplog"),
            rate(case, "raw sqlite3"),
            rate(case, "eventsourcing"),
            ratio(case, "raw sqlite3"),
            ratio(case, "eventsourcing"),
            "; ".join(case.verdicts().values()),
        )
    Console(width=max(console.width, 120)).print(table)


@bench_app.command("record")
def bench_record(
    scenario: Annotated[str, typer.Option(help="Scenario to run.")] = "invoice-extraction",
    model_version: Annotated[str, typer.Option(help="Its model version.")] = "sim-v2",
    runs: Annotated[int, typer.Option(min=1, max=100_000, help="Runs per measurement.")] = 100,
    repeat: Annotated[int, typer.Option(min=1, max=20, help="Measurements; median kept.")] = 3,
    as_json: JsonOption = False,
) -> None:
    """Harness end-to-end events/s against appending the identical batches directly."""
    from .bench.record import run_record_benchmark

    result = run_record_benchmark(
        scenario=scenario,
        model_version=model_version,
        runs=runs,
        repeat=repeat,
        progress=None if as_json else err_console,
    )
    if as_json:
        _print_json(result.as_dict())
        return
    console.print(
        f"{result.scenario}/{result.model_version}: {result.runs} runs, {result.events:,} events "
        f"in {result.batches:,} durable commits\n"
        f"  harness end to end   {result.harness_events_per_second:>10,.0f} events/s\n"
        f"  store append alone   {result.append_events_per_second:>10,.0f} events/s\n"
        f"  ratio                {result.ratio:>10.2f}x   (target {result.verdict})",
        highlight=False,
    )


@bench_app.command("rebuild")
def bench_rebuild(
    events: Annotated[int, typer.Option(min=10_000, help="Events in the store.")] = 1_000_000,
    repeat: Annotated[int, typer.Option(min=1, max=10, help="Rounds; best kept.")] = 1,
    as_json: JsonOption = False,
) -> None:
    """Rebuild events/s and peak memory against a raw read-and-decode pass over the log."""
    from .bench.rebuild import run_rebuild_benchmark

    result = run_rebuild_benchmark(
        events=events, repeat=repeat, progress=None if as_json else err_console
    )
    if as_json:
        _print_json(result.as_dict())
        return
    console.print(
        f"{result.events:,} events in {result.runs:,} runs (SQLite)\n"
        f"  raw read + json.loads   {result.raw.events_per_second:>10,.0f} events/s   "
        f"peak {result.raw.peak_rss_mb:,.0f} MB\n"
        f"  steplog rebuild         {result.rebuild.events_per_second:>10,.0f} events/s   "
        f"peak {result.rebuild.peak_rss_mb:,.0f} MB\n"
        f"  ratio {result.ratio:.2f}x ({result.verdicts['speed']}), "
        f"memory {result.verdicts['memory']}",
        highlight=False,
    )


@bench_app.command("replay")
def bench_replay(
    runs: Annotated[int, typer.Option(min=2, max=1000, help="50-step runs to replay.")] = 20,
    as_json: JsonOption = False,
) -> None:
    """Exact replays/s of 50-step runs, next to reading the same runs' events."""
    from .bench.replay import run_replay_benchmark

    result = run_replay_benchmark(runs=runs)
    if as_json:
        _print_json(result.as_dict())
        return
    console.print(
        f"{result.runs} runs of 50 steps ({result.events_per_run:.0f} events each), "
        f"{result.identical}/{result.runs} replays identical\n"
        f"  read the run's events   {result.read_seconds_per_run * 1000:8.2f} ms\n"
        f"  replay it exactly       {result.replay_seconds_per_run * 1000:8.2f} ms "
        f"({result.replays_per_second:.1f} replays/s, {result.ratio_to_read:.0f}x the read)",
        highlight=False,
    )


@bench_app.command("ui")
def bench_ui(
    runs: Annotated[int, typer.Option(min=1000, help="Runs in the store.")] = 100_000,
    repeat: Annotated[int, typer.Option(min=1, max=10, help="Renders per page; median.")] = 3,
    as_json: JsonOption = False,
) -> None:
    """Cold server-side render time of every UI page on a large store (target < 1.5 s)."""
    from .bench.ui import run_ui_benchmark

    events, timings = run_ui_benchmark(
        runs=runs, repeat=repeat, progress=None if as_json else err_console
    )
    if as_json:
        _print_json({"runs": runs, "events": events, "pages": [t.as_dict() for t in timings]})
        return
    table = Table("page", "median render", "target", title=f"{runs:,} runs, {events:,} events")
    for t in timings:
        table.add_row(t.page, f"{t.seconds:.2f} s", t.verdict)
    console.print(table)


def main() -> None:
    """Entry point of the ``steplog`` console script."""
    app()
