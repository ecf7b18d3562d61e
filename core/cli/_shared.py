"""Shared pieces of the CLI: the app, its sub-apps, common options and output helpers."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from sqlalchemy.exc import DBAPIError
from typer.core import TyperGroup

from ..database import explain
from ..errors import SteplogError
from ..store import EventStore

console = Console() if sys.stdout.isatty() else Console(width=160)  # no wrapping when piped
err_console = Console(stderr=True, soft_wrap=True)  # one line per message, grep-able


class _Group(TyperGroup):
    """Turns steplog's errors into one clean ``error:`` line and exit code 1."""

    def invoke(self, ctx: Any) -> Any:  # a click Context (typer vendors its own click)
        try:
            return super().invoke(ctx)
        except SteplogError as exc:
            _print_error(str(exc))
        except DBAPIError as exc:  # the database failed mid-command, outside the store's retries
            _print_error(str(explain(None, exc)))


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
