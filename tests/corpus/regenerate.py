"""Regenerate the conformance corpus: record every framework, then rewrite the README table.

    python -m tests.corpus.regenerate [--framework NAME ...] [--no-record] [--no-results]

Run from the repository root with the project's venv (``make corpus``). Frameworks pin
conflicting versions of the same libraries (openai, protobuf, opentelemetry), so each records in
a venv of its own, ``.venv-corpus-<framework>``, made from the ``corpus-<framework>`` extra
of pyproject.toml when missing or when that extra changed. Each framework script checks what its
agent did against the hand-written ``expected/`` files and fails loudly on a difference. Needs
PyPI once (the installs); the agents only talk to a local fake server.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

from .conformance import CORPUS, MODES, VARIANTS

ROOT = CORPUS.parent.parent
TABLE_START, TABLE_END = "<!-- table: python -m tests.corpus.regenerate -->", "<!-- /table -->"


def frameworks() -> list[str]:
    return sorted(p.stem for p in (CORPUS / "frameworks").glob("*.py") if p.stem != "__init__")


def requirements(framework: str) -> list[str]:
    """The ``corpus-<framework>`` extra of pyproject.toml: what the framework records with."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = "corpus-" + framework.replace("_", "-")
    found: list[str] = project["optional-dependencies"][extra]
    return found


def ensure_venv(framework: str) -> Path:
    """The framework's venv, (re)installed when its requirements changed; its python."""
    folder = ROOT / f".venv-corpus-{framework}"
    python = folder / "bin" / "python"
    stamp = folder / ".corpus-requirements"
    wanted = requirements(framework)
    digest = hashlib.sha256("\n".join(wanted).encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return python
    print(f"{framework}: installing {' '.join(wanted)} into {folder}", flush=True)
    if not python.exists():
        venv.create(folder, with_pip=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *wanted], check=True)
    stamp.write_text(digest)
    return python


def record(framework: str, python: Path) -> bool:
    """Run the framework's script (it records every mode and checks it); True when it passed."""
    module = f"tests.corpus.frameworks.{framework}"
    done = subprocess.run([str(python), "-m", module], cwd=ROOT, check=False)
    return done.returncode == 0


def _conformance_cells(framework: str) -> tuple[str, list[str]]:
    """Per mode, how many variants conform; and the first difference of each failing mode."""
    from .report import outcome

    counts, reasons = [], []
    for mode in MODES:
        outcomes = [outcome(framework, mode, variant) for variant in VARIANTS]
        passed = sum(1 for o in outcomes if o == "pass")
        counts.append(f"{mode} {passed}/{len(VARIANTS)}")
        failing = [(v, o) for v, o in zip(VARIANTS, outcomes, strict=True) if o != "pass"]
        if failing:
            variants = ", ".join(v for v, _ in failing)
            reasons.append(f"| {framework} | {mode} | {variants} | {failing[0][1][:300]} |")
    return " · ".join(counts), reasons


def _not_in_trace() -> str:
    """What the traces do not carry, by framework (the expectations' ``not_in_trace``): the
    stored runs show nothing there rather than invent it."""
    lines = ["What a framework's traces do not carry (stored as nothing, never invented):", ""]
    for framework in frameworks():
        path = CORPUS / "expected" / framework / "ok.json"
        missing = json.loads(path.read_text()).get("not_in_trace", {}) if path.exists() else {}
        for field, why in missing.items():
            lines.append(f"- **{framework}** {field.replace('_', ' ')}: {why}")
    return "\n".join(lines) if len(lines) > 2 else "Every trace carries everything compared."


def write_readme(*, with_results: bool) -> None:
    rows, reasons = [], []
    for framework in frameworks():
        meta_path = CORPUS / "traces" / framework / "meta.json"
        if not meta_path.exists():
            continue
        meta = json.loads(meta_path.read_text())
        versions = ", ".join(f"{name} {version}" for name, version in meta["packages"].items())
        modes = ", ".join(m for m in MODES if (meta_path.parent / f"{m}.jsonl").exists())
        row = f"| {framework} | {versions} | {meta['instrumentation']} | {modes} |"
        if with_results:
            cells, failing = _conformance_cells(framework)
            row += f" {cells} |"
            reasons += failing
        rows.append(row)
    header = "| framework | recorded with | instrumentation | modes |"
    rule = "| --- | --- | --- | --- |"
    if with_results:
        header += " conforms (variants per mode) |"
        rule += " --- |"
    table = "\n".join([header, rule, *rows])
    if with_results:
        if reasons:
            table += "\n\nWhere a run does not yet read as the agent ran (first difference):\n\n"
            head = ["| framework | mode | variants | difference |", "| --- | --- | --- | --- |"]
            table += "\n".join([*head, *reasons])
        else:
            table += "\n\nEvery run of every variant reads as the agent ran."
        table += "\n\n" + _not_in_trace()
    readme = CORPUS / "README.md"
    before, rest = readme.read_text().split(TABLE_START, 1)
    after = rest.split(TABLE_END, 1)[1]
    readme.write_text(f"{before}{TABLE_START}\n{table}\n{TABLE_END}{after}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="tests.corpus.regenerate")
    parser.add_argument("--framework", action="append", choices=frameworks())
    parser.add_argument("--no-record", action="store_true", help="only rewrite the README")
    parser.add_argument("--no-results", action="store_true", help="README without conformance")
    options = parser.parse_args()
    failed = []
    if not options.no_record:
        for framework in options.framework or frameworks():
            if not record(framework, ensure_venv(framework)):
                failed.append(framework)
    write_readme(with_results=not options.no_results)
    if failed:
        sys.exit(f"recording failed or differed from expected/: {', '.join(failed)}")


if __name__ == "__main__":
    main()
