"""Commands that take in traces from elsewhere (OTLP, Inspect AI logs, portable JSONL), export
the log, and retry quarantined input (the OTLP receiver is in :mod:`.serve`)."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import SteplogError
from ..ingest.sniff import INSPECT, JSONL, OTLP, require_kind
from ._shared import (
    DbOption,
    JsonOption,
    _print_json,
    _typer,
    app,
    console,
    description_column,
    err_console,
    quarantine_app,
    styled,
)

if TYPE_CHECKING:
    from rich.progress import Progress

    from ..ingest.redaction import Redactor
    from ..ingest.report import ImportReport
    from ..store import EventStore


def default_redactor(extra_file: Path | None = None) -> "Redactor":
    """The redactor for an import or the receiver (imported on use: it compiles patterns)."""
    from ..ingest.redaction import default_redactor as build

    return build(extra_file)


import_app = _typer(
    "Import traces from elsewhere: OTLP JSON, Inspect AI logs, portable JSONL, chat messages, "
    "mini-swe-agent trajectories."
)
app.add_typer(import_app, name="import")

RedactOption = Annotated[
    Path | None,
    typer.Option(
        "--redact-patterns",
        envvar="STEPLOG_REDACT_PATTERNS",
        help="File of extra secret patterns (one RE2 regular expression per line) to redact "
        "on ingest, on top of the built-in ones.",
        exists=True,
        dir_okay=False,
    ),
]
FileArgument = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="File to import.")]


def _progress(as_json: bool) -> "Progress":
    from rich.progress import BarColumn, DownloadColumn, Progress

    return Progress(
        description_column(),
        BarColumn(),
        DownloadColumn(),
        console=err_console,
        transient=True,
        disable=as_json or not err_console.is_terminal,
    )


@contextmanager
def _store(db: str | None) -> Iterator["EventStore"]:
    from ..store import EventStore

    store = EventStore.open(db)
    try:
        yield store
    finally:
        store.close()


def _finish(report: "ImportReport", origin: str, source: str, as_json: bool) -> None:
    """Print the report (for a folder, a line per file first); exit 1 when anything was
    quarantined or a file of a folder was refused (the rest is stored either way)."""
    if as_json:
        _print_json(report.as_dict())
    else:
        for one in report.files:
            console.print(
                f"{one.file}: refused: {one.refused}"
                if one.refused is not None
                else f"{one.file}: {one.runs} run(s), appended {one.appended}, already stored "
                f"{one.already_stored}, quarantined {one.quarantined}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
        refused = f", refused {len(report.refused)} file(s)" if report.files else ""
        console.print(
            f"{report.runs} run(s): appended {report.appended} event(s), already stored "
            f"{report.already_stored}, quarantined {len(report.quarantined)}{refused}",
            highlight=False,
        )
    stops = [bad for bad in report.quarantined if bad.location == "stop"]  # read no further
    shown = [bad for bad in report.quarantined if bad.location != "stop"]
    for bad in shown[:20]:
        err_console.print(f"{origin}: {bad.location}: {bad.reason}", highlight=False, markup=False)
    if len(shown) > 20:
        err_console.print(
            f"... and {len(shown) - 20} more: steplog quarantine list --source '{source}'",
            highlight=False,
            markup=False,
        )
    for bad in stops:
        err_console.print(f"error: {origin}: {bad.reason}", highlight=False, markup=False)
    if report.quarantined or report.refused:
        raise typer.Exit(1)


@import_app.command("jsonl")
def import_jsonl_cmd(
    file: FileArgument,
    db: DbOption = None,
    redact_patterns: RedactOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import portable JSONL (as written by `steplog export`); bad lines are quarantined.

    Idempotent: lines carry their event ids, so importing a file twice adds nothing. Payloads
    are redacted like every other import.
    """
    require_kind(file, JSONL)
    redactor = default_redactor(redact_patterns)
    with _store(db) as store, _progress(as_json) as progress:
        task = progress.add_task(f"importing {file.name}", total=file.stat().st_size)
        from ..ingest.jsonl import import_jsonl

        report = import_jsonl(
            store,
            file,
            redactor=redactor,
            on_progress=lambda n: progress.update(task, completed=n),
        )
    _finish(report, str(file), f"jsonl:{file}", as_json)


@import_app.command("otlp")
def import_otlp_cmd(
    file: FileArgument,
    db: DbOption = None,
    redact_patterns: RedactOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import captured OTLP/JSON traces: one ExportTraceServiceRequest per file or per line.

    Each trace becomes a run (see README, "OTLP"); spans are idempotent by trace and span id.
    """
    from ..ingest.otlp.files import read_documents
    from ..ingest.otlp.pipeline import OtlpIngest, import_documents

    require_kind(file, OTLP)
    redactor = default_redactor(redact_patterns)
    source = f"otlp:{file}"
    with _store(db) as store, _progress(as_json) as progress:
        task = progress.add_task(f"importing {file.name}", total=None)
        ingest = OtlpIngest(store, redactor, source=source)
        report = import_documents(
            ingest, read_documents(file), on_progress=lambda n: progress.advance(task, n)
        )
    _finish(report, str(file), source, as_json)


@import_app.command("inspect")
def import_inspect_cmd(
    path: Annotated[
        Path, typer.Argument(exists=True, help="An Inspect AI log (.eval or .json) or a folder.")
    ],
    db: DbOption = None,
    redact_patterns: RedactOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import Inspect AI evaluation logs: each sample and epoch becomes a run."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress

    from ..ingest.inspect import import_inspect

    require_kind(path, INSPECT)
    redactor = default_redactor(redact_patterns)
    with (
        _store(db) as store,
        Progress(
            description_column(),
            BarColumn(),
            MofNCompleteColumn(),
            console=err_console,
            transient=True,
            disable=as_json or not err_console.is_terminal,
        ) as progress,
    ):
        task = progress.add_task(f"importing {path.name}", total=None)
        report = import_inspect(
            store,
            path,
            redactor=redactor,
            on_progress=lambda done, total: progress.update(task, completed=done, total=total),
        )
    _finish(report, str(path), f"inspect:{path}", as_json)


@app.command("reassemble")
def reassemble_cmd(
    trace: Annotated[
        list[str] | None,
        typer.Option("--trace", help="Map this stored trace again (repeatable)."),
    ] = None,
    all_traces: Annotated[
        bool, typer.Option("--all", help="Map every stored trace again.")
    ] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Map stored OTLP traces again with the current mapping (after an upgrade).

    A run that now reads differently is revised through new events (RunRevised); one that reads
    the same is left alone, so running it twice changes nothing.
    """
    from ..ingest.otlp.pipeline import OtlpIngest

    if bool(trace) == all_traces:
        raise SteplogError("name traces with --trace ID (repeatable), or use --all")
    with _store_must_exist(db) as store:
        ingest = OtlpIngest(store, default_redactor(), source="otlp:reassemble")
        report = ingest.reassemble([t.lower() for t in trace] if trace else None)
    if as_json:
        _print_json(report.as_dict())
    else:
        console.print(
            f"{len(report.revised)} run(s) revised, {len(report.unchanged)} unchanged",
            highlight=False,
        )
    for problem in [*(f"trace {t}: no stored spans" for t in report.missing), *report.failed]:
        err_console.print(problem, highlight=False, markup=False)
    if report.missing or report.failed:
        raise typer.Exit(1)


@app.command("export")
def export_cmd(
    db: DbOption = None,
    run: Annotated[list[str] | None, typer.Option("--run", help="Only this run (repeatable).")] = (
        None
    ),
    scenario: Annotated[
        list[str] | None, typer.Option("--scenario", help="Only runs of this scenario.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write to this file instead of standard output."),
    ] = None,
) -> None:
    """Export stored events as portable JSONL (`steplog import jsonl` reads it back)."""
    from ..ingest.export import export_events, to_line, write_atomically

    with _store_must_exist(db) as store:
        events = export_events(store, run_ids=run or (), scenarios=scenario or ())
        first = next(events, None)  # a missing run is an error before any file is created
        lines = (to_line(event) for event in chain([first] if first else [], events))
        if output is None:
            sys.stdout.writelines(lines)
            return
        count = write_atomically(output, lines)
    err_console.print(f"exported {count} event(s) to {output}", highlight=False)


@contextmanager
def _store_must_exist(db: str | None) -> Iterator["EventStore"]:
    from ..store import EventStore

    store = EventStore.open(db, must_exist=db is not None)
    try:
        yield store
    finally:
        store.close()


@quarantine_app.command("retry")
def quarantine_retry(
    record_ids: Annotated[
        list[int] | None, typer.Argument(help="Quarantine record ids (default: see --all).")
    ] = None,
    all_records: Annotated[
        bool, typer.Option("--all", help="Retry every unresolved record (of --source).")
    ] = False,
    source: Annotated[str | None, typer.Option(help="Only records of this source.")] = None,
    db: DbOption = None,
    redact_patterns: RedactOption = None,
    as_json: JsonOption = False,
) -> None:
    """Try quarantined records again (after a fix: a new event type, an upcaster, a free run).

    A record that now stores is marked resolved (it stays listed with --resolved); one that
    still fails keeps its place with the new reason.
    """
    from ..ingest.quarantine import retry

    if not record_ids and not all_records:
        raise SteplogError("name the record ids to retry, or pass --all")
    redactor = default_redactor(redact_patterns)
    with _store_must_exist(db) as store:
        outcomes = retry(store, record_ids or None, source=source, redactor=redactor)
    if as_json:
        _print_json({"retried": [o.as_dict() for o in outcomes]})
    else:
        for o in outcomes:
            mark = ("resolved", "green") if o.resolved else ("still failing", "red")
            console.print(styled(f"#{o.record_id} ", mark, f": {o.detail}"), highlight=False)
        if not outcomes:
            console.print("nothing to retry", highlight=False)
    if any(not o.resolved for o in outcomes):
        raise typer.Exit(1)
