"""The CLI's shape (issue 19): grouped help, readable placeholders, --version, JSON documents,
quarantine purge, and the start-up benchmark."""

from __future__ import annotations

import json
import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from steplog import __version__
from steplog.bench.cli import cpu_seconds
from steplog.cli import PANELS, app
from steplog.store import EventStore

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def _top_level_names() -> set[str]:
    root = typer.main.get_command(app)
    return set(root.list_commands(typer.Context(root)))  # type: ignore[attr-defined]


def test_every_command_sits_in_one_help_panel() -> None:
    placed = [name for names in PANELS.values() for name in names]
    assert len(placed) == len(set(placed)), "a command is in two panels"
    assert set(placed) == _top_level_names()
    code, out, _ = invoke("--help")
    assert code == 0
    for panel in PANELS:
        assert re.search(rf"─ {panel} ─", out), f"no {panel} panel in steplog --help"
    assert "Other" not in out


def test_help_shows_placeholders_not_type_names() -> None:
    for args in (["runs", "--help"], ["run", "--help"], ["compare", "--help"], ["db", "--help"]):
        code, out, _ = invoke(*args)
        assert code == 0, out
        assert "<str>" not in out and "<bool>" not in out and "<int>" not in out, out
        assert "4611686018427387904" not in out  # bounds that fit a BIGINT are checked, not shown
    _, out, _ = invoke("runs", "--help")
    assert re.search(r"--db\s+URL", out) and re.search(r"--limit\s+N", out)
    assert re.search(r"--model-version\s+VERSION", out)


def test_version() -> None:
    code, out, _ = invoke("--version")
    assert code == 0 and out.strip() == f"steplog {__version__}"


def test_a_seed_beyond_bigint_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = invoke(
        "run", "sandbox", "-m", "sim-v1", "--seed", str(2**63), "--db", str(tmp_path / "s.db")
    )
    assert code == 2 and "--seed" in err


def test_quarantine_purge_deletes_only_what_it_is_told(tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"run_id": "r", "type": "Nope", "payload": {}}\nnot json\n')
    other = tmp_path / "other.jsonl"
    other.write_text("also not json\n")
    assert invoke("import", "jsonl", str(bad), "--db", db)[0] == 1
    assert invoke("import", "jsonl", str(other), "--db", db)[0] == 1
    code, out, _ = invoke("quarantine", "list", "--db", db, "--json")
    records = json.loads(out)["records"]
    assert code == 0 and len(records) == 3

    code, _, err = invoke("quarantine", "purge", "--source", f"jsonl:{bad}", "--db", db)
    assert code == 1 and "--yes" in err  # nothing is deleted without confirmation
    assert len(json.loads(invoke("quarantine", "list", "--db", db, "--json")[1])["records"]) == 3

    code, out, _ = invoke(
        "quarantine", "purge", "--source", f"jsonl:{bad}", "--yes", "--db", db, "--json"
    )
    assert code == 0 and json.loads(out)["purged"] == 2
    left = json.loads(invoke("quarantine", "list", "--db", db, "--json")[1])["records"]
    assert [r["source"] for r in left] == [f"jsonl:{other}"]

    code, out, _ = invoke("quarantine", "purge", str(left[0]["id"]), "--yes", "--db", db)
    assert code == 0
    assert json.loads(invoke("quarantine", "list", "--db", db, "--json")[1])["records"] == []
    store = EventStore.open(db)
    assert store.count_quarantined() == 0
    store.close()


def test_json_lists_are_documents_with_paging(tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    code, _, _ = invoke("run", "sandbox", "-m", "sim-v1", "--runs", "3", "--seed", "1", "--db", db)
    assert code == 0
    code, out, _ = invoke("runs", "--limit", "2", "--db", db, "--json")
    page = json.loads(out)
    assert code == 0 and len(page["runs"]) == 2
    assert page["limit"] == 2 and page["offset"] == 0 and page["next_offset"] == 2
    assert all("run_id" in run for run in page["runs"])
    last = json.loads(invoke("runs", "--limit", "2", "--offset", "2", "--db", db, "--json")[1])
    assert len(last["runs"]) == 1 and last["next_offset"] is None
    code, out, _ = invoke("runs", "--limit", "2", "--db", db)
    assert "--offset 2" in " ".join(out.split())  # the table says there is more
    shown = json.loads(invoke("show", page["runs"][0]["run_id"], "--db", db, "--json")[1])
    assert shown["run_id"] == page["runs"][0]["run_id"] and "task_id" not in shown


def test_cpu_seconds_counts_the_child_not_the_wall_clock() -> None:
    """A child that sleeps costs almost no CPU; one that computes costs what it computed."""
    import sys

    sleeper = cpu_seconds([sys.executable, "-c", "import time; time.sleep(0.5)"], {})
    worker = cpu_seconds([sys.executable, "-c", "x = 0\nfor i in range(3_000_000): x += i"], {})
    assert sleeper < worker


def test_bench_cli_measures_each_command_against_python() -> None:
    code, out, _ = invoke("bench", "cli", "--repeat", "3", "--json")
    assert code == 0, out
    document = json.loads(out)
    by_command = {c["command"]: c for c in document["commands"]}
    assert {"steplog --help", "steplog runs"} <= set(by_command)
    for timing in by_command.values():
        assert timing["baseline_s"] > 0
        assert timing["min_s"] <= timing["median_s"] <= timing["max_s"]
        assert timing["ratio"] == timing["median_s"] / timing["baseline_s"]
        assert timing["verdict"] in ("ok", "MISSED", "-")
    assert by_command["steplog --help"]["target_s"] == 0.3
    assert by_command["steplog --version"]["target_s"] == 0.1
    assert by_command["steplog runs"]["target_s"] == 0.6


def test_the_cli_imports_no_heavy_library_until_a_command_needs_it() -> None:
    """Start-up stays fast by construction: help and argument parsing need only typer and rich
    (a wall-clock target is checked by `steplog bench cli`, not here)."""
    import subprocess
    import sys

    heavy = ("sqlalchemy", "scipy", "numpy", "pandas", "streamlit", "alembic", "pydantic", "httpx",
             "sklearn")  # fmt: skip
    probe = f"import sys, steplog.cli\nprint(','.join(m for m in {heavy!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "", f"importing steplog.cli loads {loaded}: import it inside the command"


def test_help_and_version_load_neither_sqlmodel_nor_the_tables() -> None:
    """`steplog --help` and `--version` run the real entry point without loading the model layer
    (SQLModel, SQLAlchemy, pydantic, the tables): only commands that open a store pay for it."""
    import subprocess
    import sys

    heavy = ("sqlmodel", "sqlalchemy", "pydantic", "steplog.models", "steplog.store._engine")
    for flag in ("--help", "--version"):
        probe = (
            "import sys\n"
            "from steplog.__main__ import main\n"
            f"sys.argv = ['steplog', {flag!r}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print('LOADED=' + ','.join(m for m in {heavy!r} if m in sys.modules))"
        )
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout
        assert out.strip().splitlines()[-1] == "LOADED=", f"steplog {flag}: {out[-300:]}"
