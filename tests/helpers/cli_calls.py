"""Child process: run several ``steplog`` commands in one interpreter and report each outcome.

Usage: python cli_calls.py JSON, where JSON is a list of argument lists. Prints a JSON list of
[exit code, everything printed] pairs. The fault drills start it without root's permission
overrides (setpriv), so that file permissions apply to it, and pay the import cost only once.
"""

from __future__ import annotations

import json
import sys

from typer.testing import CliRunner

from steplog.cli import app


def main() -> None:
    runner = CliRunner()
    outcomes = []
    for args in json.loads(sys.argv[1]):
        result = runner.invoke(app, args)
        outcomes.append([result.exit_code, result.stdout + result.stderr])
    print(json.dumps(outcomes))


if __name__ == "__main__":
    main()
