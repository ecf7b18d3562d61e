"""Shared pieces of the CLI: the app, its sub-apps, common options and output helpers."""

import json
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer._click.exceptions import UsageError  # typer vendors its own click
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from ..errors import SteplogError

if TYPE_CHECKING:
    from rich.progress import ProgressColumn

    from ..store import EventStore

# Markup is off: run ids, failure messages and file names are data, and a "[/x]" or "[red]" in
# them must print as written (with markup on it raised MarkupError or vanished). Styled parts
# are built explicitly with :func:`styled`.
console = (
    Console(markup=False) if sys.stdout.isatty() else Console(width=160, markup=False)
)  # no wrapping when piped
err_console = Console(stderr=True, soft_wrap=True, markup=False)  # one line per message


# The choices of enum-like options: typer lists them in --help and refuses any other value
# with one error line (``_Group``). They mirror the values the projections write.
RunStatus = Literal["running", "awaiting_approval", "completed", "failed", "aborted"]
FailureStatus = Literal["new", "triaged", "fixed", "regressed"]
FailureSort = Literal["count", "last_seen", "first_seen"]
FailureGrouping = Literal["step", "error-type"]


def description_column() -> "ProgressColumn":
    """A progress bar's description column that prints file names and labels as written."""
    from rich.progress import TextColumn

    return TextColumn("{task.description}", style="progress.description", markup=False)


def styled(*parts: "str | tuple[str, str]") -> Text:
    """One line from plain parts and ``(text, style)`` parts; no part is parsed as markup."""
    return Text.assemble(*parts)


class _Group(TyperGroup):
    """Turns steplog's errors into one clean ``error:`` line and exit code 1."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _name_placeholders(super().get_params(ctx))

    def invoke(self, ctx: Any) -> Any:  # a click Context (typer vendors its own click)
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            _print_usage_error(exc)
        except SteplogError as exc:
            _print_error(str(exc))
        except KeyboardInterrupt:
            interrupted()
        except Exception as exc:
            # The database failed mid-command, outside the store's retries. SQLAlchemy is only
            # imported by commands that use it, so without it no such error can be raised.
            sa_exc = sys.modules.get("sqlalchemy.exc")
            if sa_exc is None or not isinstance(exc, sa_exc.DBAPIError):
                raise
            from ..store import explain

            _print_error(str(explain(None, exc)))


_reported = {"interrupt": False}


def interrupted(message: str = "interrupted") -> NoReturn:
    """Say that Ctrl-C stopped the command (once), and exit 130."""
    if not _reported["interrupt"]:
        err_console.print(message, highlight=False, soft_wrap=True)
        _reported["interrupt"] = True
    raise typer.Exit(130)


def interrupt_reported() -> bool:
    """Whether :func:`interrupted` has already told the user."""
    return _reported["interrupt"]


def _print_usage_error(exc: Any) -> NoReturn:
    """A bad option or argument of a command (``--status bogus``): one ``error:`` line naming
    the choices and where to find help, exit 2 (typer draws a box of several lines)."""
    message = " ".join(exc.format_message().replace("Value error, ", "").split())
    where = getattr(exc.ctx, "command_path", None)
    hint = f" (see {where} --help)" if where else ""
    err_console.print(styled(("error:", "bold red"), " ", message, hint), highlight=False)
    raise typer.Exit(2)


def _print_error(message: str) -> None:
    err_console.print(styled(("error:", "bold red"), " ", message), highlight=False)
    raise typer.Exit(1)


def _typer(help_text: str) -> typer.Typer:
    return typer.Typer(
        cls=_Group, help=help_text, no_args_is_help=True, pretty_exceptions_enable=False
    )


_PLACEHOLDERS = {
    "model_version": "VERSION",
    "baseline": "VERSION",
    "candidate": "VERSION",
    "run_id": "RUN",
    "host": "ADDRESS",
}


def _placeholder(param: TyperOption | TyperArgument) -> str | None:
    """``--limit N``, ``--model-version VERSION``; None keeps typer's own (choices)."""
    name = param.name or "value"
    described = param.type_descriptor
    if described.is_choice:
        return None
    if name in _PLACEHOLDERS:
        return _PLACEHOLDERS[name]
    kind = described.annotation
    if kind is int and name not in ("seed", "port"):
        return "N"
    if kind is float:
        return "NUMBER"
    return name.upper().replace("_", "-")


def readable_command(cls: type[TyperCommand] | None) -> type[TyperCommand]:
    """A command class whose help shows placeholders such as ``--db URL`` and ``--limit N``
    instead of the type names typer prints (``<str>``, ``<bool>`` for flags)."""
    base = cls or TyperCommand
    if getattr(base, "_readable", False):
        return base

    class Readable(base):  # type: ignore[valid-type,misc]
        _readable = True

        def get_params(self, ctx: Any) -> list[Any]:
            return _name_placeholders(super().get_params(ctx))

    return Readable


def _name_placeholders(params: list[Any]) -> list[Any]:
    """Give every parameter a readable placeholder, once (help, completion and --help too)."""
    for param in params:
        if isinstance(param, TyperArgument):
            # the name column already shows the placeholder; typer's type column would add <str>
            setattr(param, "display_type_rich", _no_type)  # noqa: B010
            if param.metavar is None:
                param.metavar = _placeholder(param)
        elif param.metavar is None and isinstance(param, TyperOption):
            flag = getattr(param, "is_flag", False)
            param.metavar = "" if flag else _placeholder(param)
    return params


def _no_type(ctx: Any) -> None:
    return None


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        console.print(f"steplog {__version__}", highlight=False)
        raise typer.Exit()


app = _typer("steplog: find out why long-horizon agent runs fail.")


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """steplog: find out why long-horizon agent runs fail.

    Every step of every agent run goes into an event store (SQLite by default, PostgreSQL to
    scale); failures, comparisons between model versions and replays are rebuilt from it.
    """


db_app = _typer("Database schema: upgrade, downgrade, show the current revision.")
events_app = _typer("The raw event log: tail it (import it with `steplog import jsonl`).")
bench_app = _typer("Benchmarks, reported as ratios against baselines measured in the same run.")
app.add_typer(db_app, name="db")
app.add_typer(events_app, name="events")
quarantine_app = _typer("Input that could not be stored, kept with the reason; retry or purge.")
app.add_typer(bench_app, name="bench")
app.add_typer(quarantine_app, name="quarantine")

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="URL",
        envvar="STEPLOG_DATABASE_URL",
        help="Database URL (sqlite:///path, postgresql://...) or SQLite file path. "
        "Default: ~/.steplog/steplog.db (STEPLOG_HOME overrides the folder).",
        show_default=False,
    ),
]


def fits_bigint(value: int | None) -> int | None:
    """Option callback: positions, ids and seeds are stored as 64-bit integers."""
    if value is not None and value >= 2**62:
        raise typer.BadParameter("must be below 2**62 (4611686018427387904)")
    return value


JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
ScenarioFilterOption = Annotated[str | None, typer.Option(help="Only this scenario.")]
"""``--scenario`` of the commands that list or compare stored runs: keep one scenario's."""


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
def _opened(db: str | None) -> Iterator["EventStore"]:
    """The store at ``db``, closed afterwards; an explicit ``--db`` must already exist."""
    from ..store import EventStore

    store = EventStore.open(db, must_exist=db is not None)
    try:
        yield store
    finally:
        store.close()
