"""The ``steplog`` command's entry point (also ``python -m steplog``).

It imports the CLI inside the guard, so Ctrl-C at any moment -- even while Python is still
importing, or inside code that wraps the interrupt in another exception -- prints one line
instead of a traceback.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Run the ``steplog`` command line; Ctrl-C exits 130 with one line on stderr."""
    if sys.argv[1:] == ["--version"]:  # answered before typer, rich and the commands load
        from . import __version__

        sys.stdout.write(f"steplog {__version__}\n")
        return
    try:
        from .cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("steplog: interrupted\n")
        sys.exit(130)
    except Exception as exc:
        if not caused_by_ctrl_c(exc):
            raise
        sys.stderr.write("steplog: interrupted\n")
        sys.exit(130)


def caused_by_ctrl_c(error: BaseException) -> bool:
    """Whether ``error`` was raised because of a Ctrl-C: code that wraps what it catches turns
    the KeyboardInterrupt into its cause (Python itself does, as ``RuntimeError: Error calling
    __set_name__``, when Ctrl-C lands while a class body of an imported module is set up)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


if __name__ == "__main__":
    main()
