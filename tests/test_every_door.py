"""Bad input at every door gets one clear message, and the security habits hold.

Each case below is one door (a CLI argument, a scenario file, a JSONL file, an OTLP file, an
Inspect log) with one bad input, the exit code and the words the user must see. Deeper tests
of each door live next to their feature (test_bad_input, test_ingest_*, test_ui); this list is
the index, and it fails if any door prints a traceback.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steplog.cli import app

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()

BAD_SCENARIO = """
name = "broken"
description = "a step reads an output no earlier step declares"
instances = [{ id = "i1" }]
[[steps]]
name = "a"
reads = ["nowhere"]
"""

# (id, files to write {name: text}, argv with {tmp} and {db}, exit code, words in stderr)
DOORS = [
    ("db url", {}, ["runs", "--db", "mysql://x/y"], 1, "unsupported database 'mysql'"),
    ("missing db", {}, ["runs", "--db", "{tmp}/nope.db"], 1, "there is no steplog database"),
    ("bad number", {}, ["runs", "--limit", "zero", "--db", "{db}"], 2, "valid integer"),
    ("unknown run", {}, ["show", "no-such-run", "--db", "{db}"], 1, "no-such-run"),
    ("unknown scenario", {}, ["run", "nope", "-m", "sim-v1", "--db", "{db}"], 1, "nope"),
    ("bad gate", {}, ["run", "sandbox", "-m", "sim-v1", "--gate-policy", "maybe", "--db", "{db}"],
     1, "maybe"),
    ("bad compare", {}, ["compare", "--baseline", "a", "--candidate", "b", "--confidence", "2",
                         "--db", "{db}"], 2, "--confidence"),
    ("bad counts", {}, ["compare-counts", "--baseline", "3/x", "--candidate", "1/2"], 1, "3/x"),
    ("jsonl", {"bad.jsonl": '{"run_id": "r", "type": "Nope", "payload": {}}\n'},
     ["import", "jsonl", "{tmp}/bad.jsonl", "--db", "{db}"], 1, "unknown event type"),
    ("otlp", {"bad.json": '{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "zz"}]}]}]}'},
     ["import", "otlp", "{tmp}/bad.json", "--db", "{db}"], 1, "traceId is missing"),
    ("otlp file", {"noise.json": "\u0000\u0001 not json"},
     ["import", "otlp", "{tmp}/noise.json", "--db", "{db}"], 1, "binary file, not text"),
    ("inspect", {"results.json": '{"accuracy": 0.5}'},
     ["import", "inspect", "{tmp}/results.json", "--db", "{db}"], 1, "not a readable Inspect"),
    ("redact patterns", {"patterns.txt": "([unclosed\n"},
     ["import", "otlp", "{tmp}/bad.json", "--redact-patterns", "{tmp}/patterns.txt",
      "--db", "{db}"], 1, "is not a regular expression"),
    ("export", {}, ["export", "--run", "ghost", "--db", "{db}"], 1, "no such run(s): ghost"),
    ("quarantine", {}, ["quarantine", "show", "12345", "--db", "{db}"], 1,
     "no quarantined record 12345"),
    ("label", {}, ["label", "nope", "--label", "x", "--db", "{db}"], 1, "nope"),
    ("chaos fault", {}, ["chaos", "r", "--faults", "flood", "--db", "{db}"], 1,
     "unknown fault 'flood'"),
    ("chaos set", {}, ["chaos", "--set", "nope", "--db", "{db}"], 1, "no regression set 'nope'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("files", "argv", "code", "words"),
    [pytest.param(*case[1:], id=case[0]) for case in DOORS],
)
def test_each_door_says_what_was_wrong(
    tmp_path: Path, files: dict[str, str], argv: list[str], code: int, words: str
) -> None:
    db = tmp_path / "store.db"
    assert runner.invoke(app, ["info", "--db", str(db)]).exit_code in (0, 1)
    runner.invoke(app, ["db", "upgrade", "--db", str(db)])
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "bad.json").exists() or (tmp_path / "bad.json").write_text("{}")
    args = [a.replace("{tmp}", str(tmp_path)).replace("{db}", str(db)) for a in argv]
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    message = " ".join((result.stderr or result.output).split())
    assert words in message, message
    assert ("Traceback" not in result.output and result.exception is None) or isinstance(
        result.exception, SystemExit
    )


def test_a_bad_scenario_file_is_named_with_its_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    (folder / "broken.toml").write_text(BAD_SCENARIO)
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    result = runner.invoke(app, ["scenarios"])
    assert result.exit_code == 1
    message = " ".join(result.stderr.split())
    assert "broken.toml" in message and "models: Field required" in message


# --- security habits ---------------------------------------------------------------------------

FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_MODULES = {"pickle", "marshal", "shelve", "dill", "cloudpickle"}


def _python_files() -> list[Path]:
    return sorted((ROOT / "core").rglob("*.py")) + sorted((ROOT / "ui").rglob("*.py"))


def test_stored_data_is_never_unpickled_or_evaluated() -> None:
    found = []
    for path in _python_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            called = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            if called and node.func.id in FORBIDDEN_CALLS:  # type: ignore[attr-defined]
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id}()")
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                )
                for name in names:
                    if name.split(".")[0] in FORBIDDEN_MODULES:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} import {name}")
            if isinstance(node, ast.Attribute) and node.attr == "import_module":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} import_module")
    allowed = {  # never a name taken from event data:
        "core/cli/__init__.py",  # the CLI's own topic modules, a literal list
        "core/cli/replay.py",  # --import: the user's own module, named on their command line
        "core/ingest/inspect_values.py",  # inspect_ai.scorer, a literal name
        "core/ingest/inspect_read.py",  # inspect_ai.log, a literal name
        "ui/common.py",  # the cache re-finds core functions by their own __module__
    }
    assert [f for f in found if f.split(":")[0] not in allowed] == []


def test_servers_bind_to_loopback_by_default() -> None:
    for command in ("serve", "ui"):
        result = runner.invoke(app, [command, "--help"])
        assert "127.0.0.1" in result.output, command


def test_every_ingest_door_redacts(tmp_path: Path) -> None:
    secret = "sk-ant-abcdefghijklmnopqrstuvwxyz012345"
    trace, span = "1" * 32, "2" * 16
    document = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": trace,
                                "spanId": span,
                                "name": "chat",
                                "startTimeUnixNano": "1764460800000000000",
                                "attributes": [
                                    {"key": "gen_ai.operation.name",
                                     "value": {"stringValue": "chat"}},
                                    {"key": "gen_ai.input.messages",
                                     "value": {"stringValue": f"use {secret}"}},
                                ],
                            },
                            {"traceId": trace, "spanId": "bad", "name": f"token {secret}"},
                        ]
                    }
                ]
            }
        ]
    }  # fmt: skip
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(document))
    db = tmp_path / "s.db"
    runner.invoke(app, ["import", "otlp", str(path), "--db", str(db)])
    exported = runner.invoke(app, ["export", "--db", str(db)]).stdout
    quarantined = runner.invoke(app, ["quarantine", "list", "--db", str(db), "--json"]).stdout
    assert "[REDACTED]" in exported and secret not in exported + quarantined
