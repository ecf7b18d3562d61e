"""CLI for runs: scenarios, run, runs, show, approve, resume and the idempotent demo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest
from helpers.children import reap, spawn
from helpers.scenarios import write_scenario
from typer.testing import CliRunner

from steplog.cli import app

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_scenarios_lists_the_four_seeded_ones() -> None:
    code, out, _ = invoke("scenarios", "--json")
    assert code == 0
    found = {s["name"]: s for s in json.loads(out)["scenarios"]}
    assert set(found) >= {"sandbox", "invoice-extraction", "customer-service", "data-migration"}
    assert found["sandbox"]["steps"] == [3, 5, 8, 12]
    assert found["customer-service"]["config"] == {
        "max_steps": 20, "max_retry_per_step": 3, "allowed_total_retries": 10,
        "timeout_seconds": 600.0,
    }  # fmt: skip
    assert found["invoice-extraction"]["instances"] == 10


def test_run_then_runs_and_show(store_url: str) -> None:
    code, out, _ = invoke("run", "sandbox", "-m", "sim-v2", "--runs", "8", "--seed", "1",
                          "--db", store_url, "--json")  # fmt: skip
    assert code == 0
    outcomes = json.loads(out)["runs"]
    assert len(outcomes) == 8
    assert {o["status"] for o in outcomes} <= {"completed", "failed"}

    code, out, _ = invoke("runs", "--db", store_url, "--json", "--scenario", "sandbox")
    listing = json.loads(out)
    assert listing["next_offset"] is None
    listed = listing["runs"]
    assert sorted(r["run_id"] for r in listed) == sorted(o["run_id"] for o in outcomes)
    assert {r["task_instance_id"] for r in listed} == {"chain-3", "chain-5", "chain-8", "chain-12"}

    run_id = outcomes[0]["run_id"]
    code, out, _ = invoke("show", run_id, "--db", store_url, "--json")
    state = json.loads(out)
    assert state["run_id"] == run_id
    assert state["steps"][0]["name"] == "step_01"
    code, out, _ = invoke("show", run_id, "--db", store_url)
    assert code == 0 and "step_01" in out and "sim-v2" in out


def test_run_with_workers(store_url: str) -> None:
    code, out, _ = invoke("run", "data-migration", "-m", "sim-v1", "--runs", "6", "--workers",
                          "2", "--seed", "4", "--db", store_url, "--json")  # fmt: skip
    assert code == 0
    assert len({o["run_id"] for o in json.loads(out)["runs"]}) == 6


def test_manual_gate_from_the_cli(store_url: str) -> None:
    code, out, _ = invoke("run", "data-migration", "-m", "sim-v2", "--seed", "3",
                          "--gate-policy", "manual", "--run-id", "mig-1", "--db", store_url,
                          "--json")  # fmt: skip
    assert json.loads(out)["runs"][0]["status"] == "awaiting_approval"
    code, _, err = invoke("resume", "mig-1", "--db", store_url)
    assert code == 1 and "steplog approve mig-1 --step import" in " ".join(err.split())
    code, out, _ = invoke("approve", "mig-1", "--step", "import", "--db", store_url, "--json")
    assert code == 0
    approved = json.loads(out)
    assert approved["status"] == "completed"  # seed 3 on sim-v2 passes import and reconcile
    assert [s["name"] for s in approved["steps"]][-2:] == ["import", "reconcile"]
    code, _, err = invoke("approve", "mig-1", "--step", "import", "--db", store_url)
    assert code == 1 and "not waiting for an approval" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "nope", "-m", "sim-v1"], "no registered scenario 'nope'"),
        (["run", "sandbox", "-m", "gpt-9"], "no model version 'gpt-9'"),
        (["run", "sandbox", "-m", "sim-v1", "--instance", "chain-99"], "no task instance"),
        (["run", "sandbox", "-m", "sim-v1", "--gate-policy", "maybe"], "--gate-policy must be"),
        (
            ["run", "sandbox", "-m", "sim-v1", "--runs", "2", "--run-id", "x"],
            "use it with --runs 1",
        ),
        (["run", "sandbox", "-m", "sim-v1", "--runs", "0"], "Invalid value"),
        (["show", "ghost"], "no run 'ghost'"),
        (["resume", "ghost"], "no run 'ghost'"),
        (["approve", "ghost", "--step", "x"], "no run 'ghost'"),
        (["show", "orphan"], "does not start with RunStarted"),
    ],
)
def test_run_commands_reject_bad_input_clearly(
    args: list[str], message: str, steplog_home: str
) -> None:
    from steplog.events import StepStarted
    from steplog.store import EventStore

    EventStore.open().append("orphan", [StepStarted(step="a", step_index=0)])
    code, _, err = invoke(*args)
    assert code in (1, 2)
    assert message in " ".join(err.split())


def test_demo_seeds_every_scenario_twice_and_is_idempotent(steplog_home: str) -> None:
    code, out, _ = invoke("demo", "--runs", "3", "--no-ui")
    assert code == 0
    assert "demo: 24 new run(s), 0 already there" in out
    code, out, _ = invoke("demo", "--runs", "3", "--no-ui")
    assert "demo: 0 new run(s), 24 already there" in out
    code, out, _ = invoke("runs", "--json", "--limit", "100")
    pairs = {(r["scenario"], r["model_version"]) for r in json.loads(out)["runs"]}
    assert len(pairs) == 8


def test_user_scenarios_from_steplog_scenarios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_url: str
) -> None:
    folder = tmp_path / "mine"
    write_scenario(folder, name="my-flow")
    (folder / "not-a-file.toml").mkdir()  # folders that look like scenario files are skipped
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    code, out, _ = invoke("run", "my-flow", "-m", "sim-v2", "--db", store_url)
    assert code == 0 and "1 run(s): 1 completed" in out


def test_bench_record_compares_the_harness_with_the_store_on_identical_batches() -> None:
    code, out, _ = invoke("bench", "record", "--runs", "3", "--repeat", "1", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["runs"] == 3
    assert result["events"] > result["batches"] > 3 * 20  # one durable commit per step at least
    met = result["harness_events_per_second"] >= 0.8 * result["append_events_per_second"]
    assert result["verdict"] == ">= 0.8x " + ("ok" if met else "MISSED")
    assert result["code_alone_cpu_ms_per_run"] > 0
    assert result["harness_cpu_ms_per_run"] > result["append_cpu_ms_per_run"] > 0


def test_bench_record_sdk_reports_the_recorders_cpu_per_event_beyond_agent_and_append() -> None:
    code, out, _ = invoke("bench", "record", "--sdk", "--runs", "2", "--json")
    assert code == 0, out
    results = {result["agent"]: result for result in json.loads(out)}
    assert set(results) == {"decorated", "openai-zero-code"}
    for result in results.values():
        assert result["runs"] == 2 and result["events_per_run"] > 50 * 4  # 50 steps, 3 calls each
        extra = result["recorded_ms_per_run"] - result["alone_ms_per_run"]
        extra -= result["append_ms_per_run"]
        assert result["separate_us_per_event"] == pytest.approx(
            1000 * extra / result["events_per_run"]
        )
        # the headline: beyond the agent appending the same batches itself, step by step
        extra = result["recorded_ms_per_run"] - result["interleaved_ms_per_run"]
        per_event = 1000 * extra / result["events_per_run"]
        assert result["overhead_us_per_event"] == pytest.approx(per_event)
        assert result["verdict"] == "<= 20 us " + ("ok" if per_event <= 20 else "MISSED")
        assert result["recorded_ms_per_run"] > result["append_ms_per_run"] > 0
        assert result["interleaved_ms_per_run"] > 0
    # the openai client's own work (building requests, parsing replies) is the agent alone's
    client, plain = results["openai-zero-code"], results["decorated"]
    assert client["alone_ms_per_run"] > plain["alone_ms_per_run"]


@pytest.mark.parametrize(
    "engine", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_bench_record_recorders_measures_both_sides_holding_every_event(
    engine: str, request: pytest.FixtureRequest
) -> None:
    db = ["--db", request.getfixturevalue("pg_base_url")] if engine == "postgresql" else []
    args = ["--recorders", "2", "--runs", "4", "--repeat", "1", "--json", *db]
    code, out, _ = invoke("bench", "record", *args)
    assert code == 0, out
    result = json.loads(out)
    assert (result["engine"], result["recorders"], result["runs"]) == (engine, 2, 4)
    assert result["events"] > 4 * 20 and result["baseline_events_per_second"] > 0
    ratio = result["durable_events_per_second"] / result["baseline_events_per_second"]
    assert result["ratio"] == pytest.approx(ratio) and result["met"] == (ratio >= 0.9)
    assert ("RAM disk" in result["baseline"]) == (engine == "sqlite")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _FakeStreamlit:
    """Stands in for the Streamlit process: records its command, exits with ``code``."""

    started: ClassVar[list[list[str]]] = []
    code: ClassVar[int] = 0

    def __init__(self, command: list[str], **kwargs: object) -> None:
        self.started.append(command)

    def wait(self, timeout: float | None = None) -> int:
        return self.code


def test_demo_then_serves_the_ui_on_loopback(
    steplog_home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    monkeypatch.setattr(subprocess, "Popen", _FakeStreamlit)
    monkeypatch.setattr(_FakeStreamlit, "started", [])
    port = _free_port()
    code, out, _ = invoke("demo", "--runs", "1", "--port", str(port))
    assert code == 0, out
    said = " ".join(out.split())  # long store paths wrap the line
    assert f"steplog UI on http://127.0.0.1:{port}" in said and "press Ctrl-C to stop" in said
    (command,) = _FakeStreamlit.started
    assert command[1:4] == ["-m", "streamlit", "run"] and command[4].endswith("ui/app.py")
    assert command[command.index("--server.address") + 1] == "127.0.0.1"
    assert command[command.index("--server.port") + 1] == str(port)
    code, _, err = invoke("ui", "--host", "0.0.0.0", "--port", str(_free_port()))
    assert code == 0 and "has no authentication" in " ".join(err.split())


def test_a_taken_port_fails_at_once_and_says_which(
    steplog_home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import subprocess

    monkeypatch.setattr(subprocess, "Popen", _FakeStreamlit)
    monkeypatch.setattr(_FakeStreamlit, "started", [])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args in (["ui"], ["demo", "--runs", "1"]):
            code, out, err = invoke(*args, "--port", str(port))
            message = " ".join(err.split())
            assert code == 1, out
            assert f"port {port} on 127.0.0.1 is already in use" in message
            assert "pick another with --port" in message and "Traceback" not in message
    assert _FakeStreamlit.started == []  # Streamlit was never started
    assert "demo: " not in out  # demo checked the port before seeding


def test_a_streamlit_that_fails_is_an_error(
    steplog_home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    monkeypatch.setattr(subprocess, "Popen", _FakeStreamlit)
    monkeypatch.setattr(_FakeStreamlit, "code", 1)
    code, _, err = invoke("ui", "--port", str(_free_port()))
    assert code == 1 and "the UI (Streamlit) exited with code 1" in err


def test_stopping_the_ui_stops_streamlit_too(steplog_home: str) -> None:
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ui = spawn(
        [sys.executable, "-m", "steplog.cli", "ui", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until Streamlit answers on the port
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("steplog ui did not start Streamlit")
        ui.send_signal(signal.SIGTERM)
        ui.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) != 0:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("Streamlit kept serving after steplog ui was stopped")
    finally:
        reap(ui)
