"""Commands on the raw store: schema migrations, the event log, the quarantine."""

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from ..errors import SteplogError
from ._shared import (
    DbOption,
    JsonOption,
    _opened,
    _print_json,
    console,
    db_app,
    events_app,
    fits_bigint,
    quarantine_app,
)

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from ..store import StoredEvent

RevisionArgument = Annotated[
    str, typer.Argument(metavar="REVISION", help="Target revision, e.g. 0004; 'head' the newest.")
]

# --- db --------------------------------------------------------------------------------------


@contextmanager
def _engine(db: str | None) -> Iterator["Engine"]:
    from ..store import create_engine_for, resolve_url

    engine = create_engine_for(resolve_url(db))
    try:
        yield engine
    finally:
        engine.dispose()


def _migrate(
    db: str | None, move: Callable[["Engine"], None]
) -> tuple[str, str | None, str | None]:
    """Move the schema of ``db`` with ``move``: (the URL shown, revision before, after)."""
    from ..store import current_revision, redact

    with _engine(db) as engine:
        before = current_revision(engine)
        move(engine)
        after = current_revision(engine)
    return redact(str(engine.url)), before, after


@db_app.command("upgrade")
def db_upgrade(
    revision: RevisionArgument = "head",
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Migrate the database schema up to REVISION (default: head)."""
    from ..store import upgrade

    url, before, after = _migrate(db, lambda engine: upgrade(engine, revision))
    if as_json:
        _print_json({"url": url, "before": before, "after": after})
        return
    console.print(f"{url}: {before or 'empty'} -> {after}", highlight=False)


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[
        str, typer.Argument(metavar="REVISION", help="Target revision; 'base' drops all tables.")
    ],
    db: DbOption = None,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm: this can drop data.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Migrate the database schema down to REVISION. Destroys data the older schema lacks."""
    from ..store import downgrade

    if not yes:
        raise SteplogError("downgrading can drop stored events; repeat with --yes to confirm")
    url, before, after = _migrate(db, lambda engine: downgrade(engine, revision))
    if as_json:
        _print_json({"url": url, "before": before, "after": after})
        return
    console.print(f"{url}: now at {after or 'base (empty)'}", highlight=False)


@db_app.command("current")
def db_current(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Show the database's schema revision and the head this steplog needs."""
    from ..store import current_revision, head_revision, redact

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


@events_app.command("tail")
def events_tail(
    db: DbOption = None,
    after: Annotated[
        int | None,
        typer.Option(
            min=0,
            metavar="POSITION",
            callback=fits_bigint,
            help="Show events after this log position.",
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=100_000, metavar="N", help="At most N events.")
    ] = 20,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = (
        False
    ),
    as_json: JsonOption = False,
    as_jsonl: Annotated[
        bool,
        typer.Option(
            "--jsonl", help="One event per line, the format `steplog import jsonl` reads."
        ),
    ] = False,
) -> None:
    """Print the newest events (or those after --after), oldest first."""
    from ..store import EventStore

    if follow and as_json:
        raise SteplogError("--follow streams events: use --jsonl (one JSON event per line)")
    store = EventStore.open(db, must_exist=db is not None)
    try:
        cursor = max(0, store.last_position() - limit) if after is None else after
        if as_json:
            events = list(store.read_all(cursor, limit))
            _print_json(
                {
                    "events": [e.to_json() for e in events],
                    "after": cursor,
                    "last_position": store.last_position(),
                }
            )
            return
        while True:
            batch = list(store.read_all(cursor, None if follow else limit))
            if batch:
                _print_events(batch, as_jsonl)
                cursor = batch[-1].position
            if not follow:
                return
            time.sleep(0.5)
    except KeyboardInterrupt:
        return
    finally:
        store.close()


def _print_events(events: "list[StoredEvent]", as_jsonl: bool) -> None:
    if as_jsonl:
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

SourceOption = Annotated[
    str | None,
    typer.Option(metavar="SOURCE", help="Only this source, e.g. jsonl:PATH or otlp:PATH."),
]


@quarantine_app.command("list")
def quarantine_list(
    db: DbOption = None,
    source: SourceOption = None,
    after: Annotated[
        int,
        typer.Option(
            min=0, metavar="ID", callback=fits_bigint, help="Records after this id (paging)."
        ),
    ] = 0,
    limit: Annotated[
        int, typer.Option(min=1, max=10_000, metavar="N", help="At most N records.")
    ] = 50,
    resolved: Annotated[
        bool, typer.Option("--resolved", help="List records a retry has stored instead.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List quarantined input still waiting (or, with --resolved, stored by a retry)."""
    with _opened(db) as store:
        found = store.quarantined(after_id=after, limit=limit + 1, source=source, resolved=resolved)
    records, more = found[:limit], len(found) > limit
    next_after = records[-1].id if more else None
    if as_json:
        _print_json(
            {
                "records": [r.to_json() for r in records],
                "limit": limit,
                "after": after,
                "next_after": next_after,
            }
        )
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
    if next_after is not None:
        console.print(f"more: steplog quarantine list --after {next_after}", highlight=False)


@quarantine_app.command("show")
def quarantine_show(
    record_id: Annotated[
        int,
        typer.Argument(
            min=1,
            metavar="ID",
            callback=fits_bigint,
            help="Quarantine record id (quarantine list).",
        ),
    ],
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


@quarantine_app.command("purge")
def quarantine_purge(
    record_ids: Annotated[
        list[int] | None,
        typer.Argument(metavar="[ID]...", help="Records to delete (default: all that match)."),
    ] = None,
    source: SourceOption = None,
    resolved: Annotated[
        bool, typer.Option("--resolved", help="Only records a retry has already stored.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm: the raw input is gone.")] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete quarantine records for good (stored events are never touched).

    For input that can never be stored, e.g. a file imported with the wrong command. Name the
    records (ids), a --source, or --resolved; with none of them every record goes.
    """
    if not yes:
        raise SteplogError("purging deletes the quarantined input for good; repeat with --yes")
    with _opened(db) as store:
        removed = store.purge_quarantined(
            record_ids=record_ids or (), source=source, resolved_only=resolved
        )
    if as_json:
        _print_json({"purged": removed})
        return
    console.print(f"purged {removed} quarantine record(s)", highlight=False)
