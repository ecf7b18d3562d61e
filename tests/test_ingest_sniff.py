"""Each importer, given a file of another kind, says what the file looks like and exits 1."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from helpers.inspect_logs import generate_logs
from helpers.otlp import agent_trace, request
from typer.testing import CliRunner

from steplog.cli import app
from steplog.ingest.sniff import INSPECT, JSONL, MESSAGES, MINI_SWE, OTLP, sniff

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One real file of each kind: written by the tools that write them."""
    folder = tmp_path_factory.mktemp("kinds")
    otlp = folder / "traces.json"
    otlp.write_text(json.dumps(request(*agent_trace(random.Random(3)))))
    db = folder / "store.db"
    assert runner.invoke(app, ["import", "otlp", str(otlp), "--db", str(db)]).exit_code == 0
    exported = folder / "events.jsonl"
    result = runner.invoke(app, ["export", "--db", str(db), "--output", str(exported)])
    assert result.exit_code == 0, result.output
    logs = generate_logs(folder / "inspect")
    any_log = next(iter(logs.values()))
    messages = folder / "chat.json"
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    trajectory = folder / "run.traj.json"
    trajectory.write_text(
        json.dumps(
            {
                "info": {"exit_status": "Submitted"},
                "messages": [{"role": "system", "content": "you are an agent"}],
                "trajectory_format": "mini-swe-agent-1.1",
            }
        )
    )
    return {
        "otlp": otlp,
        "jsonl": exported,
        "inspect-eval": any_log["eval"],
        "inspect-json": any_log["json"],
        "messages": messages,
        "mini-swe-agent": trajectory,
    }


def test_sniff_names_each_kind(files: dict[str, Path]) -> None:
    assert sniff(files["otlp"]) is OTLP
    assert sniff(files["jsonl"]) is JSONL
    assert sniff(files["inspect-eval"]) is INSPECT
    assert sniff(files["inspect-json"]) is INSPECT
    assert sniff(files["messages"]) is MESSAGES
    assert sniff(files["mini-swe-agent"]) is MINI_SWE


WRONG = [
    ("otlp", "jsonl", "steplog JSONL events", "steplog import jsonl"),
    ("otlp", "inspect-eval", "an Inspect AI log", "steplog import inspect"),
    ("otlp", "inspect-json", "an Inspect AI log", "steplog import inspect"),
    ("jsonl", "otlp", "OTLP/JSON traces", "steplog import otlp"),
    ("jsonl", "inspect-json", "an Inspect AI log", "steplog import inspect"),
    ("jsonl", "messages", "OpenAI-format chat messages", "steplog import messages"),
    ("inspect", "otlp", "OTLP/JSON traces", "steplog import otlp"),
    ("inspect", "jsonl", "steplog JSONL events", "steplog import jsonl"),
    ("otlp", "mini-swe-agent", "a mini-swe-agent trajectory", "steplog import mini-swe-agent"),
]


@pytest.mark.parametrize(("command", "kind", "looks_like", "advice"), WRONG)
def test_importer_refuses_another_kind(
    files: dict[str, Path], tmp_path: Path, command: str, kind: str, looks_like: str, advice: str
) -> None:
    db = tmp_path / "store.db"
    result = runner.invoke(app, ["import", command, str(files[kind]), "--db", str(db)])
    assert result.exit_code == 1
    assert f"looks like {looks_like}" in result.stderr
    assert f"{advice} {files[kind]}" in result.stderr
    assert "Traceback" not in result.output


def test_otlp_import_of_json_without_spans_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text('{"accuracy": 0.5, "n": 10}')
    result = runner.invoke(app, ["import", "otlp", str(path), "--db", str(tmp_path / "s.db")])
    assert result.exit_code == 1
    assert "not an OTLP/JSON request: no resourceSpans (its keys: accuracy, n)" in result.stderr
