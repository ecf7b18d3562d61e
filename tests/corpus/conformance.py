"""Import a corpus trace (as recorded or in a variant) through ``steplog import otlp`` and say
every way the stored run differs from the hand-written expectation of what the agent did.

Used by ``tests/test_corpus_conformance.py`` and by ``python -m tests.corpus.report``.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from steplog.cli import app
from steplog.events import ModelCalled, RunRevised, RunStarted, ToolCalled
from steplog.projections.queries import list_failures, list_runs, refresh
from steplog.read_models import RunSummary
from steplog.store import EventStore

CORPUS = Path(__file__).resolve().parent
MODES = ("ok", "tool-error", "recovered", "crash")
VARIANTS = ("as-recorded", "shuffled", "no-root", "late-children")


def frameworks() -> list[str]:
    return sorted(path.name for path in (CORPUS / "traces").iterdir() if path.is_dir())


CASES = [
    (framework, mode)
    for framework in frameworks()
    for mode in MODES
    if (CORPUS / "traces" / framework / f"{mode}.jsonl").exists()
]


# --- the variants: transformations of one recorded file ----------------------------------------


def lines_of(framework: str, mode: str) -> list[str]:
    path = CORPUS / "traces" / framework / f"{mode}.jsonl"
    return [line for line in path.read_text().splitlines() if line.strip()]


def _span(line: str) -> dict[str, Any]:
    (resource,) = json.loads(line)["resourceSpans"]
    (scope,) = resource["scopeSpans"]
    (span,) = scope["spans"]
    return dict(span)


def is_root(line: str) -> bool:
    return not _span(line).get("parentSpanId")


def variant_files(lines: list[str], variant: str, seed: str) -> list[list[str]]:
    """The files (each a list of lines, imported in order) a variant of a trace arrives as.

    ``shuffled``: the spans in a random order; ``no-root``: every root span lost; ``late-
    children``: the last third of the children (in the order they ended) in a second file,
    imported after the first was assembled.
    """
    if variant == "as-recorded":
        return [lines]
    if variant == "shuffled":
        shuffled = list(lines)
        random.Random(seed).shuffle(shuffled)
        return [shuffled]
    if variant == "no-root":
        return [[line for line in lines if not is_root(line)]]
    if variant == "late-children":
        children = [line for line in lines if not is_root(line)]
        late = children[len(children) - max(1, len(children) // 3) :]
        return [[line for line in lines if line not in late], late]
    raise ValueError(variant)


# --- importing and reading back ----------------------------------------------------------------


@dataclass
class StoredRun:
    """The run as it now reads (after its last revision), and its summary."""

    run_id: str
    summary: RunSummary
    events: list[Any]
    failure_signatures: set[str]

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


def _current_reading(events: list[Any]) -> list[Any]:
    revisions = [n for n, event in enumerate(events) if isinstance(event, RunRevised)]
    if not revisions:
        return events
    revised = events[revisions[-1]]
    return [revised.started, *events[revisions[-1] + 1 :]]


def import_files(url: str, files: list[list[str]], folder: Path) -> list[StoredRun]:
    """``steplog import otlp`` each file in turn into the store at ``url``; its runs."""
    runner = CliRunner()
    for n, lines in enumerate(files):
        path = folder / f"part-{n}.jsonl"
        path.write_text("".join(line + "\n" for line in lines))
        result = runner.invoke(app, ["import", "otlp", str(path), "--db", url])
        assert result.exit_code == 0, f"import of part {n}: {result.stdout}{result.stderr}"
    store = EventStore.open(url)
    try:
        refresh(store)
        signatures = {failure.signature for failure in list_failures(store, limit=1000)}
        runs = []
        for summary in list_runs(store, limit=1000):
            events = [e.to_event() for e in store.read_run(summary.run_id)]
            reading = _current_reading(events)
            runs.append(StoredRun(summary.run_id, summary, reading, signatures))
        return runs
    finally:
        store.close()


_TEMPLATE: list[Path] = []


def fresh_sqlite(folder: Path) -> str:
    """The URL of a new, migrated SQLite store in ``folder`` (a copy of one migrated once)."""
    if not _TEMPLATE:
        template = Path(tempfile.mkdtemp(prefix="steplog-corpus-")) / "template.db"
        EventStore.open(f"sqlite:///{template}").close()
        _TEMPLATE.append(template)
    shutil.copyfile(_TEMPLATE[0], folder / "store.db")
    return f"sqlite:///{folder}/store.db"


# --- the comparison with the hand-written expectation ------------------------------------------


def _short(name: str | None) -> str:
    return (name or "").rsplit(".", 1)[-1]


NOT_IN_TRACE = ("model_calls", "tokens", "tool_args", "tool_status")
"""What an expectation may declare its trace does not carry (``not_in_trace``: field -> why):
the stored run must then show nothing invented -- no calls, no tokens, no arguments, tools ok."""


def expectation(framework: str, mode: str, variant: str) -> dict[str, Any]:
    """What the agent did, as far as its trace (in ``variant``) can show it: the hand-written
    expectation with what the trace does not carry made empty, and the variant's own outcome
    where losing spans changes what can be known (``variants``: variant -> fields and why)."""
    expected = json.loads((CORPUS / "expected" / framework / f"{mode}.json").read_text())
    missing = expected.get("not_in_trace", {})
    unknown = set(missing) - set(NOT_IN_TRACE)
    assert not unknown, f"{framework}/{mode}: not_in_trace says {sorted(unknown)}"
    if "model_calls" in missing:
        expected["model_calls"] = 0
    if "tokens" in missing:
        expected["tokens"] = {"input": 0, "output": 0}
    if "tool_args" in missing or "tool_status" in missing:
        expected["tool_calls"] = [
            {
                **call,
                "args": None if "tool_args" in missing else call["args"],
                "ok": True if "tool_status" in missing else call["ok"],
            }
            for call in expected["tool_calls"]
        ]
    override = expected.get("variants", {}).get(variant, {})
    assert not override or override.get("why"), f"{framework}/{mode}/{variant}: say why"
    expected.update({k: v for k, v in override.items() if k != "why"})
    return expected


def differences(run: StoredRun, expected: dict[str, Any]) -> list[str]:
    """Every way the stored run differs from what the agent did (empty: it conforms)."""
    problems = []
    status = run.summary.status
    if status != expected["status"]:
        problems.append(f"status {status}, expected {expected['status']}")
    if expected["status"] == "failed" and run.summary.signature not in run.failure_signatures:
        problems.append("not in the failure library")
    calls = run.of(ModelCalled)
    if len(calls) != expected["model_calls"]:
        problems.append(f"{len(calls)} model calls, expected {expected['model_calls']}")
    tools = [(t.tool, t.args, t.status) for t in run.of(ToolCalled)]
    wanted = [(t["name"], t["args"], "ok" if t["ok"] else "error") for t in expected["tool_calls"]]
    if tools != wanted:
        problems.append(f"tool calls {tools}, expected {wanted}")
    tokens = {
        "input": sum(c.input_tokens for c in calls),
        "output": sum(c.output_tokens for c in calls),
    }
    if tokens != expected["tokens"]:
        problems.append(f"tokens {tokens}, expected {expected['tokens']}")
    error = expected.get("error")
    if error and status == "failed":
        names = {error["raised"], error["cause"]} - {None}
        stored = _short(run.summary.error_type)
        if stored not in names:
            problems.append(f"error type {run.summary.error_type!r}, expected one of {names}")
    return problems


def conformance(url: str, framework: str, mode: str, variant: str, folder: Path) -> list[str]:
    expected = expectation(framework, mode, variant)
    files = variant_files(lines_of(framework, mode), variant, f"{framework}/{mode}")
    runs = import_files(url, files, folder)
    if len(runs) != 1:
        kinds = [f"{r.summary.status} ({len(r.of(ModelCalled))} calls)" for r in runs]
        return [f"{len(runs)} runs, expected 1: {kinds}"]
    (run,) = runs
    assert run.of(RunStarted), "a run without RunStarted"
    return differences(run, expected)
