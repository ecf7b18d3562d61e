"""The ``steplog`` command line: behaviour, --json output, and clean errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steplog.cli import app
from steplog.store import EventStore, head_revision

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "seeds" / "example-events.jsonl"
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_db_upgrade_and_current(store_url: str) -> None:
    code, out, _ = invoke("db", "upgrade", "--db", store_url)
    assert code == 0, out
    code, out, _ = invoke("db", "current", "--db", store_url, "--json")
    assert code == 0
    info = json.loads(out)
    assert info["current"] == info["head"] == head_revision()
    assert info["up_to_date"] is True


def test_db_downgrade_needs_confirmation(store_url: str) -> None:
    code, _, err = invoke("db", "downgrade", "base", "--db", store_url)
    assert code == 1
    assert "repeat with --yes" in err
    assert EventStore.open(store_url).last_position() == 0  # still migrated and usable


def test_events_append_is_idempotent_and_tail_round_trips(store_url: str, tmp_path: Path) -> None:
    code, out, _ = invoke("import", "jsonl", str(EXAMPLE), "--db", store_url, "--json")
    assert code == 0
    assert json.loads(out) == {
        "appended": 9,
        "already_stored": 0,
        "runs": 1,
        "quarantined": 0,
        "errors": [],
    }
    code, out, _ = invoke("import", "jsonl", str(EXAMPLE), "--db", store_url, "--json")
    assert json.loads(out)["already_stored"] == 9

    code, out, _ = invoke("events", "tail", "--db", store_url, "--jsonl", "--limit", "100")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    source = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    assert [line["event_id"] for line in lines] == [line["event_id"] for line in source]
    assert [line["recorded_at"] for line in lines] == [line["recorded_at"] for line in source]

    # tail --json is an export: importing it into an empty store reproduces the log.
    export = tmp_path / "export.jsonl"
    export.write_text(out)
    copy = f"sqlite:///{tmp_path}/copy.db"
    assert invoke("import", "jsonl", str(export), "--db", copy)[0] == 0
    original = [e.to_json() for e in EventStore.open(store_url).read_all()]
    copied = [e.to_json() for e in EventStore.open(copy).read_all()]
    assert copied == original


def test_tail_after_and_limit(store_url: str) -> None:
    invoke("import", "jsonl", str(EXAMPLE), "--db", store_url)
    code, out, _ = invoke("events", "tail", "--db", store_url, "--after", "3", "--limit", "2")
    assert code == 0
    assert "StepCompleted" in out and "StepStarted" in out and "ToolCalled" not in out
    code, out, _ = invoke("events", "tail", "--db", store_url, "--jsonl", "--limit", "1")
    assert [json.loads(line)["type"] for line in out.splitlines()] == ["RunFailed"]


BAD_LINES = [
    (b"\xff\xfe not utf-8", "not UTF-8"),
    (b"{not json", "not JSON"),
    (b"[1, 2]", "must be a JSON object, not list"),
    (b'{"type": "RunStarted", "payload": {}}', "missing field(s): run_id"),
    (b'{"run_id": "x", "type": "Exploded", "payload": {}}', "unknown event type 'Exploded'"),
    (
        b'{"run_id": "x", "type": "StepStarted", "payload": {"step": "a", "step_index": -1}}',
        "StepStarted.step_index: Input should be greater than or equal to 0",
    ),
    (b'{"run_id": "", "type": "StepStarted", "payload": {}}', "run id must be a non-empty"),
    (
        b'{"run_id": "x", "type": "StepStarted", "seq": "3", "payload": '
        b'{"step": "a", "step_index": 0}}',
        "seq must be a non-negative integer",
    ),
    (
        b'{"run_id": "x", "type": "StepStarted", "recorded_at": "yesterday", "payload": '
        b'{"step": "a", "step_index": 0}}',
        "recorded_at 'yesterday' is not an ISO 8601 timestamp",
    ),
]


def test_bad_lines_are_quarantined_and_good_lines_still_stored(
    store_url: str, tmp_path: Path
) -> None:
    good = EXAMPLE.read_bytes().splitlines()
    lines = [good[0], *(bad for bad, _ in BAD_LINES), *good[1:]]
    # A conflict: this line claims seq 0 of a run that will already have an event there.
    lines.append(
        b'{"run_id": "example-1", "seq": 0, "type": "StepStarted", '
        b'"payload": {"step": "late", "step_index": 9}}'
    )
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    code, out, err = invoke("import", "jsonl", str(path), "--db", store_url, "--json")
    assert code == 1
    report = json.loads(out)
    assert report["appended"] == 9
    assert report["quarantined"] == len(BAD_LINES) + 1
    reasons = {int(error["where"].split()[1]): error["reason"] for error in report["errors"]}
    for offset, (_, expected) in enumerate(BAD_LINES):
        assert expected in reasons[offset + 2], reasons
        assert f"mixed.jsonl: line {offset + 2}: " in err
    assert "is at version 9, but the append expected version 0" in reasons[len(lines)]

    store = EventStore.open(store_url)
    assert store.count_quarantined() == len(BAD_LINES) + 1
    assert store.version("example-1") == 9


def test_quarantine_list_and_show(store_url: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"run_id": "x", "type": "Nope", "payload": {}}\n')
    assert invoke("import", "jsonl", str(path), "--db", store_url)[0] == 1
    code, out, _ = invoke("quarantine", "list", "--db", store_url, "--json")
    assert code == 0
    listing = json.loads(out)
    assert listing["next_after"] is None
    (record,) = listing["records"]
    assert record["source"] == f"jsonl:{path}"
    assert record["location"] == "line 1"
    assert "unknown event type 'Nope'" in record["reason"]
    assert json.loads(record["raw"])["type"] == "Nope"
    code, out, _ = invoke("quarantine", "show", str(record["id"]), "--db", store_url, "--json")
    assert json.loads(out) == record
    code, out, _ = invoke("quarantine", "list", "--db", store_url, "--source", "jsonl:other")
    assert code == 0 and "Nope" not in out


@pytest.mark.parametrize("where", ["typo/stor.db", "stor.db"])
def test_read_commands_do_not_create_a_database_at_a_mistyped_path(
    tmp_path: Path, where: str
) -> None:
    """A read command given a path that does not exist says so in one line, exits 1 and
    creates nothing (neither the file nor its folder); only writing commands create a store."""
    typo = tmp_path / where
    for command in (
        ["info"],
        ["events", "tail"],
        ["quarantine", "list"],
        ["runs"],
        ["failures"],
        ["failure", "abcdef"],
        ["show", "some-run"],
        ["metrics"],
        ["compare", "--baseline", "sim-v1", "--candidate", "sim-v2"],
        ["replay", "some-run"],
        ["diff", "run-a", "run-b"],
        ["regression-set", "list"],
        ["export", "--run", "some-run"],
    ):
        code, out, err = invoke(*command, "--db", str(typo))
        assert code == 1, (command, out, err)
        assert err.strip().splitlines() == [f"error: there is no steplog database at {typo}"], (
            command,
            err,
        )
        assert not typo.exists(), command
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "choices"),
    [
        (["runs", "--status", "bogus"], "'running', 'awaiting_approval', 'completed', 'failed'"),
        (["failures", "--status", "bogus"], "'new', 'triaged', 'fixed', 'regressed'"),
        (["failures", "--sort", "bogus"], "'count', 'last_seen', 'first_seen'"),
        (["failures", "--group-by", "bogus"], "'step', 'error-type'"),
        (["compare", "--baseline", "a", "--candidate", "b", "--paired", "bogus"], "'auto', 'on'"),
        (["compare", "--baseline", "a", "--candidate", "b", "--ci-method", "bogus"], "'wilson'"),
        (["regress", "some-set", "--mode", "bogus"], "'fork', 'rerun'"),
    ],
)
def test_enum_options_refuse_other_values_in_one_line(
    tmp_path: Path, args: list[str], choices: str
) -> None:
    """`runs --status bogus` used to print an empty table and exit 0: a value outside the
    choices is a usage error (exit 2), one line naming the choices, before any store opens."""
    db = tmp_path / "store.db"
    code, out, err = invoke(*args, "--db", str(db))
    assert code == 2, (out, err)
    (line,) = err.strip().splitlines()
    assert line.startswith("error: Invalid value for '--") and "'bogus' is not one of" in line
    assert choices in line and "--help)" in line
    assert not db.exists()


def test_info_json(store_url: str) -> None:
    invoke("import", "jsonl", str(EXAMPLE), "--db", store_url)
    code, out, _ = invoke("info", "--db", store_url, "--json")
    assert code == 0
    info = json.loads(out)
    assert (info["last_position"], info["runs"], info["quarantined"]) == (9, 1, 0)


def test_database_url_from_environment(steplog_home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPLOG_DATABASE_URL", f"sqlite:///{steplog_home}/env.db")
    code, _, _ = invoke("import", "jsonl", str(EXAMPLE))
    assert code == 0
    assert Path(f"{steplog_home}/env.db").exists()
    assert not Path(f"{steplog_home}/steplog.db").exists()


def test_demo_creates_the_default_store(steplog_home: str) -> None:
    code, out, _ = invoke("demo", "--runs", "1", "--no-ui")
    assert code == 0
    assert "runs        8" in out
    assert Path(steplog_home, "steplog.db").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["info", "--db", "mysql://root@localhost/x"], "unsupported database 'mysql'"),
        (["info", "--db", "postgresql://u:hunter2@127.0.0.1:1/x"], "cannot open the database"),
        (["events", "tail", "--after", "-1"], "Invalid value"),
        (["db", "downgrade", "nonsense", "--yes"], "cannot migrate to 'nonsense'"),
        (["info", "--db", "postgresql://u@h:notaport/db"], "not a database URL"),
        (["info", "--db", "postgresql+asyncpg://u@h/db"], "unsupported driver 'asyncpg'"),
        (["info", "--db", "sqlite+pysqlcipher:///x.db"], "unsupported driver 'pysqlcipher'"),
        (["events", "tail", "--after", "99999999999999999999"], "Invalid value"),
        (["quarantine", "show", "12345"], "no quarantined record 12345"),
        (["import", "jsonl", "/no/such/file.jsonl"], "does not exist"),
        (["show", "[/x]"], "no run '[/x]'"),  # was a MarkupError traceback
        (["show", "[red]abc"], "no run '[red]abc'"),  # was printed as "no run 'abc'"
    ],
)
def test_user_mistakes_get_one_clear_message_and_no_traceback(
    args: list[str], message: str, steplog_home: str
) -> None:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("steplog")), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode in (1, 2)
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr


def test_bracketed_data_prints_as_written(steplog_home: str, tmp_path: Path) -> None:
    """Run ids and failure messages are data, never rich markup: "[/x]" once crashed the CLI."""
    source = EXAMPLE.read_text()
    assert "example-1" in source and "read_pdf timed out after 30 s" in source
    bracketed = source.replace("example-1", "[red]run-1").replace(
        "read_pdf timed out after 30 s", "read_pdf [/bold] timed out"
    )
    path = tmp_path / "bracketed.jsonl"
    path.write_text(bracketed)
    assert invoke("import", "jsonl", str(path))[0] == 0
    code, out, err = invoke("runs")
    assert code == 0, err
    assert "[red]run-1" in out
    code, out, err = invoke("show", "[red]run-1")
    assert code == 0, err
    assert "[red]run-1" in out and "[/bold]" in out


def test_bench_append_reports_ratios(tmp_path: Path) -> None:
    code, out, _ = invoke("bench", "append", "--events", "1000", "--repeat", "1", "--json")
    assert code == 0, out
    cases = json.loads(out)["cases"]
    assert [case["batch_size"] for case in cases] == [1, 100, 1000]
    assert [case["events"] for case in cases] == [1000, 1000, 1000]  # as requested
    for case in cases:
        rates = case["events_per_second"]
        assert set(rates) == {"steplog", "raw sqlite3", "eventsourcing"}
        assert all(rate > 0 for rate in rates.values())
    assert set(cases[0]["verdicts"]) == {"raw sqlite3", "eventsourcing"}  # batch 1
    for case in cases[1:]:  # batch 100 and 1,000: 0.9x the raw writer, ok or MISSED as measured
        met = case["events_per_second"]["steplog"] >= 0.9 * case["events_per_second"]["raw sqlite3"]
        assert case["verdicts"] == {"raw sqlite3": ">= 0.9x " + ("ok" if met else "MISSED")}
