"""Commands on the raw store: schema migrations, the event log, the quarantine."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from sqlalchemy import Engine

from ..database import (
    create_engine_for,
    current_revision,
    downgrade,
    head_revision,
    redact,
    resolve_url,
    upgrade,
)
from ..errors import SteplogError
from ..store import EventStore, StoredEvent
from ._shared import (
    DbOption,
    JsonOption,
    _opened,
    _print_json,
    console,
    db_app,
    events_app,
    quarantine_app,
)
from .ingest import import_jsonl_cmd

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
    import_jsonl_cmd(file, db, None, as_json)  # the same command under its older name


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
    resolved: Annotated[
        bool, typer.Option("--resolved", help="List records a retry has stored instead.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List quarantined input still waiting (or, with --resolved, stored by a retry)."""
    with _opened(db) as store:
        records = store.quarantined(after_id=after, limit=limit, source=source, resolved=resolved)
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
    if record.resolved_at is not None:
        console.print(
            f"resolved {record.resolved_at:%Y-%m-%d %H:%M:%S}: {record.resolution}",
            highlight=False,
            markup=False,
        )
    console.print(record.raw, highlight=False, markup=False, soft_wrap=True)
