"""The ``steplog`` command line: every capability reachable from the shell, ``--json`` for scripts.

User mistakes (bad input, a database that cannot be reached, a version conflict) print one clear
``error:`` line and exit 1; usage errors exit 2. Nothing here prints a traceback for them.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
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

console = Console()
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
    sys.stdout.write(json.dumps(data, default=str) + "\n")


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
    store = EventStore.open(db, must_exist=db is not None)
    try:
        records = store.quarantined(after_id=after, limit=limit, source=source)
    finally:
        store.close()
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
    store = EventStore.open(db, must_exist=db is not None)
    try:
        record = store.quarantined_input(record_id)
    finally:
        store.close()
    if record is None:
        raise SteplogError(f"no quarantined record {record_id}")
    if as_json:
        _print_json(record.to_json())
        return
    console.print(f"#{record.id} from {record.source}, {record.location}", highlight=False)
    console.print(f"reason: {record.reason}", highlight=False, markup=False)
    console.print(record.raw, highlight=False, markup=False, soft_wrap=True)


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
    store = EventStore.open(db, must_exist=db is not None)
    try:
        summary = _store_summary(store)
    finally:
        store.close()
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


@app.command("demo")
def demo(db: DbOption = None) -> None:
    """Create the store (migrating it) and show what is in it."""
    info(db=db, as_json=False)
    console.print(
        "Append events with `steplog events append FILE.jsonl`; browse them with "
        "`steplog events tail`."
    )


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


def main() -> None:
    """Entry point of the ``steplog`` console script."""
    app()
