"""Replays never go live (issue 15, item 2): unfinished runs, unrecorded gates, approve/resume."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.scenarios import write_scenario
from typer.testing import CliRunner

from steplog.cli import app
from steplog.harness.runner import RunStateError, approve, launch, resume, start_run
from steplog.harness.scenario import get_scenario
from steplog.projections.run_state import fold
from steplog.replay import replay
from steplog.store import EventStore


@pytest.fixture
def local(tmp_path: Path) -> Iterator[EventStore]:
    store = EventStore.open(f"sqlite:///{tmp_path}/gates.db")
    yield store
    store.close()


def test_a_run_waiting_for_approval_is_not_replayed(local: EventStore) -> None:
    waiting = start_run(
        local, get_scenario("data-migration"), instance_id="table-01", model_version="sim-v2",
        seed=3, gate_policy="manual",
    )  # fmt: skip
    assert waiting.status == "awaiting_approval"
    with pytest.raises(RunStateError, match="still awaiting_approval; replay a finished run"):
        replay(local, waiting.run_id)


def test_a_gate_added_after_recording_aborts_the_replay_instead_of_waiting(
    local: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    write_scenario(folder, steps=2)
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    original = start_run(
        local, get_scenario("drill"), instance_id="case-1", model_version="sim-v2", seed=1,
        gate_policy="manual",
    )  # fmt: skip
    assert original.status == "completed"  # no gate then
    write_scenario(folder, steps=2, gate=True)  # the `finish` step now waits for a person
    result = replay(local, original.run_id)
    assert result.status == "aborted" and result.identical is False
    assert result.divergence is not None and result.divergence["step_index"] == 2
    assert "manual gate of step 'finish'" in result.divergence["got"]
    types = [e.type for e in local.read_run(result.run_id)]
    assert "ApprovalRequested" not in types and types[-2:] == ["ReplayDiverged", "RunAborted"]


def test_approve_and_resume_refuse_replays(local: EventStore, tmp_path: Path) -> None:
    # a run marked as a replay, parked at a gate (what older versions produced)
    parked = launch(
        local, get_scenario("data-migration"), instance_id="table-01", model_version="sim-v2",
        seed=3, gate_policy="manual", replay_of="some-original",
    )  # fmt: skip
    assert parked.status == "awaiting_approval"
    waiting = fold(local.read_run(parked.run_id)).current_step
    assert waiting is not None
    for attempt in (
        lambda: approve(local, parked.run_id, step=waiting.name),
        lambda: resume(local, parked.run_id),
    ):
        with pytest.raises(RunStateError, match="replays never go live"):
            attempt()
    assert fold(local.read_run(parked.run_id)).status == "awaiting_approval"  # nothing written
    url = f"sqlite:///{tmp_path}/gates.db"
    shown = CliRunner().invoke(app, ["approve", parked.run_id, "--step", waiting.name, "--db", url])
    assert shown.exit_code == 1 and "replays never go live" in shown.stderr
    assert "Traceback" not in shown.output
