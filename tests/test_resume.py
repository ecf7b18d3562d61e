"""Kill a recording run with SIGKILL mid-way, resume it, and get the uninterrupted result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.children import spawn
from helpers.scenarios import canonical_digest, write_scenario

from steplog.store import EventStore

STEPLOG = str(Path(sys.executable).with_name("steplog"))


@pytest.mark.slow
def test_sigkilled_run_resumes_from_its_last_completed_step(store_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "scenarios"
    write_scenario(folder, steps=12, base_error=0.15, tool_error_rate=0.1, wall_latency_ms=40)
    env = {**os.environ, "STEPLOG_SCENARIOS": str(folder)}
    run = [STEPLOG, "run", "drill", "-m", "sim-v1", "--seed", "21", "--db", store_url]

    subprocess.run([*run, "--run-id", "clean"], env=env, check=True, capture_output=True)
    store = EventStore.open(store_url)
    try:
        child = spawn([*run, "--run-id", "killed"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 60
        while sum(e.type == "StepCompleted" for e in store.read_run("killed")) < 3:
            assert time.monotonic() < deadline, "the child never completed three steps"
            assert child.poll() is None, "the child finished before it could be killed"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()
        cut = store.read_run("killed")
        assert cut[-1].type != "RunCompleted" and cut[-1].type != "RunFailed"

        resumed = subprocess.run(
            [STEPLOG, "resume", "killed", "--db", store_url, "--json"],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        clean, killed = store.read_run("clean"), store.read_run("killed")
        assert canonical_digest(killed) == canonical_digest(clean)
        assert [e.seq for e in killed] == list(range(len(killed)))
        assert sum(e.type == "RunStarted" for e in killed) == 1
    finally:
        store.close()
