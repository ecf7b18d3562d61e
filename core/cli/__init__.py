"""The ``steplog`` command line: every capability reachable from the shell, ``--json`` for scripts.

User mistakes (bad input, a database that cannot be reached, a version conflict) print one clear
``error:`` line and exit 1; usage errors exit 2; Ctrl-C prints one line and exits 130. Each
module of this package registers the commands of one topic on :data:`app`; :data:`PANELS` then
groups them in ``steplog --help`` by the job they serve. Heavy libraries (SQLAlchemy, scipy,
Streamlit, alembic) are imported inside the commands that need them, so help answers at once.
"""

import logging
import sys
from importlib import import_module

from ._shared import app, interrupt_reported, readable_command

TOPICS = (
    "runs",
    "ui_cmds",
    "library",
    "annotations",
    "modes",
    "search",
    "replay",
    "attribute",
    "chaos",
    "compare",
    "ingest",
    "ingest_messages",
    "serve",
    "store_cmds",
    "bench",
    "bench_ingest",
    "guide",
)
for _topic in TOPICS:
    import_module(f".{_topic}", __name__)

PANELS: dict[str, tuple[str, ...]] = {
    "Record": ("scenarios", "run", "approve", "resume", "demo"),
    "Inspect": (
        "runs",
        "show",
        "failures",
        "failure",
        "modes",
        "search",
        "label",
        "annotations",
        "regression-set",
        "metrics",
        "ui",
    ),
    "Compare": ("compare", "compare-counts"),
    "Replay": ("replay", "diff", "regress", "attribute", "chaos"),
    "Ingest": ("import", "serve", "status", "reassemble", "export", "quarantine"),
    "Store": ("info", "db", "events", "rebuild"),
    "Bench": ("bench",),
    "Help": ("guide",),
}
"""Every top-level command and group, by the job it serves (a test checks none is missing)."""


def _arrange() -> None:
    order = {name: i for i, name in enumerate(n for names in PANELS.values() for n in names)}
    panel_of = {name: panel for panel, names in PANELS.items() for name in names}
    for command in app.registered_commands:
        command.rich_help_panel = panel_of.get(command.name or "", "Other")
        command.cls = readable_command(command.cls)
    for group in app.registered_groups:
        group.rich_help_panel = panel_of.get(group.name or "", "Other")
        for sub in group.typer_instance.registered_commands if group.typer_instance else []:
            sub.cls = readable_command(sub.cls)
    app.registered_commands.sort(key=lambda c: order.get(c.name or "", len(order)))
    app.registered_groups.sort(key=lambda g: order.get(g.name or "", len(order)))


_arrange()

__all__ = ["PANELS", "app", "main"]


def main() -> None:
    """Entry point of the ``steplog`` console script."""
    # The pool logs a connection it could not reset (e.g. Ctrl-C in the middle) with a traceback
    # through logging's last resort; the command reports what went wrong itself.
    logging.getLogger("sqlalchemy.pool").addHandler(logging.NullHandler())
    try:
        app()
    except SystemExit as exc:
        # typer turns Ctrl-C outside a command (while parsing) into a silent exit 130
        if exc.code == 130 and not interrupt_reported():
            sys.stderr.write("interrupted\n")
        raise
