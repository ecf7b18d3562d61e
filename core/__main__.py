"""The ``steplog`` command's entry point (also ``python -m steplog``).

It imports the CLI inside the guard, so Ctrl-C at any moment -- even while Python is still
importing -- prints one line instead of a traceback.
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


if __name__ == "__main__":
    main()
