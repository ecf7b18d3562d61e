"""The README's commands and Python examples run here, so the front door never rots."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
README_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
STEPLOG = str(Path(sys.executable).with_name("steplog"))


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def _console_commands() -> list[str]:
    return [
        line[2:].strip()
        for block in _blocks("console")
        for line in block.splitlines()
        if line.startswith("$ ")
    ]


def test_readme_has_runnable_examples() -> None:
    assert len(_console_commands()) >= 5
    assert _blocks("python")
    assert "make demo" in README and "make test" in README


def _run_all(commands: list[str], home: Path, pg_url: str | None = None) -> None:
    env = {"STEPLOG_HOME": str(home), "PATH": str(Path(sys.executable).parent)}
    for command in commands:
        args = shlex.split(command.replace(README_PG_URL, pg_url or README_PG_URL))
        assert args[0] == "steplog", command
        result = subprocess.run(
            [STEPLOG, *args[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        # `steplog diff` exits 1 when the runs behave differently, like diff(1)
        differ = args[1] == "diff" and result.returncode == 1 and "divergence" in result.stdout
        assert result.returncode == 0 or differ, f"{command}\n{result.stdout}\n{result.stderr}"


def test_readme_console_commands_succeed(tmp_path: Path) -> None:
    _run_all([c for c in _console_commands() if README_PG_URL not in c], tmp_path / "home")


@pytest.mark.postgres
def test_readme_postgres_commands_succeed(tmp_path: Path, pg_url: str) -> None:
    commands = [c for c in _console_commands() if README_PG_URL in c]
    assert commands
    _run_all(commands, tmp_path / "home", pg_url)


def test_readme_python_examples_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the examples write their SQLite files to the working folder
    for block in _blocks("python"):
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    output = capsys.readouterr().out
    assert "run 'invoice-run-1' is at version 3, but the append expected version 1" in output
    assert "StepCompleted(step='extract'" in output
    assert (
        "['RunStarted', 'StepStarted', 'ToolCalled', 'StepCompleted', 'StepStarted', "
        "'RandomDrawn', 'ModelCalled', 'ClockRead', 'StepCompleted', 'RunCompleted']" in output
    )
