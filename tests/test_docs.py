"""The README's and the guides' command blocks run here, so the docs never rot.

The documents are read in one order (the README, then the guides in reading order, then any
other guide): every ``console`` command runs in one store, as a reader going through them would
type it.

- ``console`` blocks: each ``$ steplog ...`` line runs in order (in one store, as a reader would
  type them), and the lines written under a command must appear in its output (whitespace
  collapsed). Commands that name the README's PostgreSQL URL run against the test server.
- ``sh`` blocks: ``make`` targets must exist (``make -n``); ``steplog ui`` and ``steplog serve``
  are started on a free port, must listen, and stop cleanly on Ctrl-C.
- ``python`` blocks run, and their output is checked.
- The CLI reference (``core/guide/cli.md``) is what the commands say
  (``python -m steplog.cli.reference``).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers.children import reap, spawn

from steplog.cli import app
from steplog.cli.reference import BEGIN, END, render, splice

ROOT = Path(__file__).resolve().parent.parent
GUIDES = ROOT / "core" / "guide"
READING_ORDER = (
    "database",
    "scenarios",
    "sdk",
    "importing",
    "failures",
    "compare",
    "replay",
    "attribution",
    "ui",
    "store",
    "api",
    "development",
    "cli",
    "performance",
)
"""The guides in the order a reader goes through them (and their commands run); any other
guide follows, by name."""


def _documents() -> list[Path]:
    others = sorted(p.stem for p in GUIDES.glob("*.md") if p.stem not in READING_ORDER)
    return [ROOT / "README.md", *(GUIDES / f"{name}.md" for name in (*READING_ORDER, *others))]


DOCUMENTS = _documents()
README = (ROOT / "README.md").read_text()
CLI_GUIDE = GUIDES / "cli.md"
README_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
BIN = Path(sys.executable).parent
STEPLOG = str(BIN / "steplog")


@dataclass
class Command:
    line: str
    document: str
    expected: list[str] = field(default_factory=list)


def _blocks(language: str, documents: list[Path] = DOCUMENTS) -> list[str]:
    pattern = rf"^```{language}\n(.*?)^```"
    return [
        block
        for document in documents
        for block in re.findall(pattern, document.read_text(), flags=re.DOTALL | re.MULTILINE)
    ]


def _console_commands() -> list[Command]:
    commands: list[Command] = []
    for document in DOCUMENTS:
        for block in _blocks("console", [document]):
            for line in block.splitlines():
                if line.startswith("$ "):
                    commands.append(Command(line[2:].strip(), document.name))
                elif line.strip() and commands:
                    commands[-1].expected.append(line.strip())
    return commands


def _squash(text: str) -> str:
    return " ".join(text.split())


def _environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPLOG_")}
    env["STEPLOG_HOME"] = str(home)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run_console(commands: list[Command], home: Path, pg_url: str | None = None) -> None:
    env = _environment(home)
    for command in commands:
        words = shlex.split(command.line.replace(README_PG_URL, pg_url or README_PG_URL))
        extra = {}
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # VAR=value steplog ...
            name, _, value = words.pop(0).partition("=")
            extra[name] = value
        assert words[0] == "steplog", f"{command.document}: console commands run steplog"
        result = subprocess.run(
            [STEPLOG, *words[1:]],
            cwd=ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )
        output = _squash(result.stdout + result.stderr)
        behaves_differently = words[1] == "diff" and result.returncode == 1
        assert result.returncode == 0 or behaves_differently, (
            f"{command.document}: {command.line}\nexit {result.returncode}\n"
            f"{result.stdout}\n{result.stderr}"
        )
        for expected in command.expected:
            assert _squash(expected) in output, (
                f"{command.document} says `{command.line}` prints {expected!r}; it printed:\n"
                f"{result.stdout}"
                f"\n{result.stderr}"
            )


def test_readme_has_runnable_examples() -> None:
    commands = _console_commands()
    assert len(commands) >= 30 and sum(bool(c.expected) for c in commands) >= 15
    assert _blocks("python") and _blocks("sh")
    assert "make demo" in README and "make test" in README


def test_readme_console_commands_print_what_it_says(tmp_path: Path) -> None:
    _run_console([c for c in _console_commands() if README_PG_URL not in c.line], tmp_path / "home")


@pytest.mark.postgres
def test_readme_postgres_commands_succeed(tmp_path: Path, pg_schemas: Any) -> None:
    commands = [c for c in _console_commands() if README_PG_URL in c.line]
    assert len(commands) >= 3
    _run_console(commands, tmp_path / "home", pg_schemas.new(migrate=False))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answering(url: str, process: subprocess.Popen[str], seconds: float) -> bool:
    """Whether ``url`` answers 200 before ``seconds`` pass (the server is fully up)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def _serve_briefly(words: list[str], home: Path) -> None:
    """Start a server the README shows on a free port; it must listen, then stop on Ctrl-C."""
    port = _free_port()
    if "--port" in words:
        words[words.index("--port") + 1] = str(port)
    else:
        words += ["--port", str(port)]
    process = spawn(
        [STEPLOG, *words[1:]],
        cwd=home,
        env=_environment(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        health = "/health" if words[1] == "serve" else "/_stcore/health"
        listening = _answering(f"http://127.0.0.1:{port}{health}", process, seconds=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
        try:
            out, err = process.communicate(timeout=60)
        finally:
            reap(process)  # still running after a minute: stopped (group), never left behind
    assert listening, f"{' '.join(words)} did not listen on {port}\n{out}\n{err}"
    assert process.returncode in (0, 130), f"{' '.join(words)}: exit {process.returncode}\n{err}"
    assert "Traceback" not in err, err


def test_readme_sh_blocks_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    lines = [
        line.split("  #")[0].strip()
        for block in _blocks("sh")
        for line in block.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines
    for line in lines:
        words = shlex.split(line)
        if words[0] == "make":
            result = subprocess.run(
                ["make", "-n", *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60
            )
            assert result.returncode == 0, f"{line}: {result.stderr}"
        elif words[:2] in (["steplog", "ui"], ["steplog", "serve"]):
            _serve_briefly(words, home)
        else:
            pytest.fail(f"the docs' sh blocks hold a line this test cannot run: {line}")


def test_readme_python_examples_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the examples write their SQLite files to the working folder
    for document in DOCUMENTS:
        for block in _blocks("python", [document]):
            exec(compile(block, document.name, "exec"), {"__name__": "readme"})
    output = capsys.readouterr().out
    assert "run 'invoice-run-1' is at version 3, but the append expected version 1" in output
    assert "StepCompleted(step='extract'" in output
    assert "decisive step 1: rescued by large in 3/3 forks" in output  # SDK attribution
    assert "blamed: coder -- upgrading it to large at decisive step 1" in output
    assert (
        "['RunStarted', 'StepStarted', 'ToolCalled', 'StepCompleted', 'StepStarted', "
        "'RandomDrawn', 'ModelCalled', 'ClockRead', 'StepCompleted', 'RunCompleted']" in output
    )


def test_every_command_and_option_is_in_the_cli_guide() -> None:
    """The sqlite-utils habit: the reference is generated from the commands, and checked."""
    guide = CLI_GUIDE.read_text()
    assert BEGIN in guide and END in guide
    assert splice(guide, render(app)) == guide, (
        "core/guide/cli.md is out of date: run "
        "`.venv/bin/python -m steplog.cli.reference --write core/guide/cli.md`"
    )


def test_readme_is_a_front_door() -> None:
    """At most 300 lines, and every guide is reachable from it."""
    assert len(README.splitlines()) <= 300
    for guide in GUIDES.glob("*.md"):
        assert f"core/guide/{guide.name}" in README, f"the README does not link {guide.name}"


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors of a Markdown text (outside code blocks)."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    headings = re.findall(r"^#+ (.*)$", prose, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_link_between_the_docs_resolves() -> None:
    for document in DOCUMENTS:
        text = document.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (document.parent / path).resolve() if path else document
            assert linked.exists(), f"{document.name} links {target}: no such file"
            if anchor and linked.suffix == ".md":
                assert anchor in _anchors(linked.read_text()), (
                    f"{document.name} links {target}: no such heading"
                )


def test_guide_command_prints_every_guide() -> None:
    from typer.testing import CliRunner

    listing = CliRunner().invoke(app, ["guide"])
    assert listing.exit_code == 0
    for guide in GUIDES.glob("*.md"):
        assert guide.stem in listing.stdout
    shown = CliRunner().invoke(app, ["guide", "replay"])
    assert shown.exit_code == 0 and "fork" in shown.stdout
    missing = CliRunner().invoke(app, ["guide", "nonsense"])
    assert missing.exit_code == 1 and "the guides are:" in missing.output
