"""The ``steplog`` command line: every capability reachable from the shell, ``--json`` for scripts.

User mistakes (bad input, a database that cannot be reached, a version conflict) print one clear
``error:`` line and exit 1; usage errors exit 2. Nothing here prints a traceback for them. Each
module of this package registers the commands of one topic on :data:`app`; they are imported in
the order ``steplog --help`` lists them.
"""

from importlib import import_module

from ._shared import app

TOPICS = (
    "runs",
    "library",
    "replay",
    "compare",
    "ingest",
    "ingest_messages",
    "store_cmds",
    "bench",
)
for _topic in TOPICS:
    import_module(f".{_topic}", __name__)

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``steplog`` console script."""
    app()
