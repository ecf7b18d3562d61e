"""Print the conformance of every corpus trace as a markdown table (SQLite, every variant).

    python -m tests.corpus.report [--framework NAME]

One row per framework and mode: ``pass``, or the first way the stored run differs from what the
agent did, per variant. The same comparison as ``tests/test_corpus_conformance.py``, for a
reader rather than a test runner.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from .conformance import CASES, VARIANTS, conformance, fresh_sqlite


def outcome(framework: str, mode: str, variant: str) -> str:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        try:
            problems = conformance(fresh_sqlite(folder), framework, mode, variant, folder)
        except AssertionError as exc:
            problems = [str(exc).splitlines()[0]]
    return "pass" if not problems else "; ".join(problems).replace("|", "/")


def main() -> None:
    parser = argparse.ArgumentParser(prog="tests.corpus.report")
    parser.add_argument("--framework", action="append")
    options = parser.parse_args()
    print("| framework | mode | " + " | ".join(VARIANTS) + " |")
    print("| --- | --- |" + " --- |" * len(VARIANTS))
    for framework, mode in CASES:
        if options.framework and framework not in options.framework:
            continue
        cells = [outcome(framework, mode, variant) for variant in VARIANTS]
        print(f"| {framework} | {mode} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
