"""Replay: identical streams for every scenario and failure mode, divergence when the code
changes, forks that keep the prefix, diffs, regression sets, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.scenarios import write_scenario
from typer.testing import CliRunner

from steplog.annotations import add_to_regression_set
from steplog.cli import app
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.runner import RunStateError, approve, start_run
from steplog.harness.scenario import get_scenario
from steplog.projections.queries import list_runs, refresh, run_summary
from steplog.regress import regress
from steplog.replay import canonical, diff_runs, replay
from steplog.store import EventStore

runner = CliRunner()
SCENARIOS = ("sandbox", "invoice-extraction", "customer-service", "data-migration")


def test_exact_replay_is_identical_for_every_scenario_and_failure_mode(store: EventStore) -> None:
    runs = []
    for name in SCENARIOS:
        spec = get_scenario(name)
        for version in spec.models:  # every model version, so every failure mode
            runs += execute_all(store.url, plan_runs(spec, model_version=version, runs=20, seed=7))
    assert len(runs) >= 200
    statuses = set()
    for outcome in runs:
        result = replay(store, outcome.run_id)
        assert result.identical, (outcome.run_id, result.summary, result.first_difference)
        assert result.status == outcome.status
        statuses.add((outcome.status, outcome.failure_type))
    assert len(statuses) >= 6  # completed, and many kinds of failure, all replayed


def test_replay_serves_manual_gate_decisions_and_replays_of_replays(store: EventStore) -> None:
    spec = get_scenario("data-migration")
    waiting = start_run(
        store, spec, instance_id="table-01", model_version="sim-v2", seed=3, gate_policy="manual"
    )
    approve(store, waiting.run_id, step="import", reason="checked")
    first = replay(store, waiting.run_id)
    assert first.identical
    second = replay(store, first.run_id)
    assert second.identical and second.original == first.run_id
    refresh(store)
    assert run_summary(store, first.run_id).replay_of == waiting.run_id


def test_changed_agent_code_diverges_at_the_right_step(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    path = write_scenario(folder, steps=4)
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    original = start_run(
        store, get_scenario("drill"), instance_id="case-1", model_version="sim-v2", seed=2
    )
    # The step after s_02 now asks for an extra field: a different prompt from step 2 on.
    text = path.read_text().replace('fields = ["a", "b"]', 'fields = ["a", "b"]', 1)
    text = text.replace(
        '[[steps]]\nname = "finish"', '[[steps]]\nname = "finish"\ninputs = ["input"]'
    )
    path.write_text(text)
    result = replay(store, original.run_id)
    assert result.identical is False
    assert result.divergence is not None
    assert result.divergence["step_index"] == 4  # `finish` now reads other inputs
    assert "ModelCalled" in result.divergence["expected"]
    assert result.status == "aborted"
    types = [e.type for e in store.read_run(result.run_id)]
    assert types[-2:] == ["ReplayDiverged", "RunAborted"]


def test_an_extra_tool_call_diverges_instead_of_going_live(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    path = write_scenario(folder, steps=2)
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    original = start_run(
        store, get_scenario("drill"), instance_id="case-1", model_version="sim-v2", seed=2
    )
    path.write_text(path.read_text().replace('name = "finish"', 'name = "finish"\ntool = "audit"'))
    result = replay(store, original.run_id)
    assert result.divergence is not None
    assert result.divergence["got"].startswith("ToolCalled(audit")


def test_fork_keeps_the_prefix_and_continues_live(store: EventStore) -> None:
    sandbox = get_scenario("sandbox")
    failed = next(
        r
        for r in (
            start_run(store, sandbox, instance_id="chain-12", model_version="sim-v1", seed=s)
            for s in range(40)
        )
        if r.status == "failed" and (r.failure_step_index or 0) >= 3
    )
    k = failed.failure_step_index
    assert k is not None
    for version, expect in (("uniform-0.0", "completed"), ("sim-v1", "failed")):
        fork = replay(store, failed.run_id, fork_at_step=k, model_version=version)
        assert fork.mode == "fork" and fork.status == expect
        forked = store.read_run(fork.run_id)
        original = store.read_run(failed.run_id)

        def prefix(events: list) -> list:  # type: ignore[type-arg]
            return [
                e
                for e in canonical(events)
                if e[2].get("step_index") is not None and e[2]["step_index"] < k
            ]

        before, copied = prefix(original), prefix(forked)
        assert before
        assert copied == before  # steps before K are exactly the original's
        start = forked[0].payload
        assert (start["forked_from"], start["fork_step"], start["model_version"]) == (
            failed.run_id,
            k,
            version,
        )
    same = replay(store, failed.run_id, fork_at_step=k, model_version="sim-v1")
    # the same model from the same step, live again: the same seed gives the same run
    assert diff_runs(store, failed.run_id, same.run_id).identical is True


def test_diff_names_the_first_divergence(store: EventStore) -> None:
    invoice = get_scenario("invoice-extraction")
    a = start_run(store, invoice, instance_id="batch-01", model_version="sim-v1", seed=4)
    b = start_run(store, invoice, instance_id="batch-01", model_version="sim-v2", seed=4)
    result = diff_runs(store, a.run_id, b.run_id).as_dict()
    assert result["identical"] is False
    first = result["first_difference"]
    # not "another model answered" at RunStarted, but where the two runs behave differently
    assert first["seq"] > 0 and "model_version" not in first["fields"]
    assert first["step_index"] is not None
    assert len(result["steps"]) == max(len(a.steps), len(b.steps))
    assert diff_runs(store, a.run_id, a.run_id).identical is True


def test_regression_set_replay(store: EventStore) -> None:
    sandbox = get_scenario("sandbox")
    execute_all(store.url, plan_runs(sandbox, model_version="sim-v1", runs=20, seed=0))
    refresh(store)
    failed = [r.run_id for r in list_runs(store, status="failed", limit=5)]
    add_to_regression_set(store, "nightly", failed)
    result = regress(store, "nightly", model_version="uniform-0.0")
    assert (result["samples"], result["now_pass"]) == (len(failed), len(failed))
    paired = result["paired"]  # against the control arm: the original version, same seeds
    assert paired["both"] + paired["candidate_only"] == len(failed)
    rerun = regress(store, "nightly", model_version="uniform-0.0", mode="rerun")
    assert rerun["now_pass"] == len(failed)
    assert "now pass on uniform-0.0" in rerun["verdict"]


def test_replay_refuses_what_it_cannot_do(store: EventStore) -> None:
    from steplog import record_run

    with record_run("mine", model_version="v", store=store) as run:
        pass
    with pytest.raises(RunStateError, match="not registered in this process"):
        replay(store, run.run_id)
    with pytest.raises(RunStateError, match="no run 'ghost'"):
        replay(store, "ghost")
    done = start_run(
        store, get_scenario("sandbox"), instance_id="chain-3", model_version="uniform-0.0", seed=1
    )
    from steplog.errors import SteplogError

    with pytest.raises(SteplogError, match="use it with --fork-at-step"):
        replay(store, done.run_id, model_version="sim-v2")
    with pytest.raises(SteplogError, match="between 0 and 2"):
        replay(store, done.run_id, fork_at_step=9, model_version="sim-v2")


def test_replay_cli(store_url: str) -> None:
    store = EventStore.open(store_url)
    run = start_run(
        store, get_scenario("sandbox"), instance_id="chain-5", model_version="sim-v1", seed=3
    )
    store.close()
    result = runner.invoke(app, ["replay", run.run_id, "--db", store_url, "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["identical"] is True
    result = runner.invoke(
        app,
        [
            "replay",
            run.run_id,
            "--fork-at-step",
            "0",
            "--model-version",
            "uniform-0.0",
            "--db",
            store_url,
        ],
    )
    assert result.exit_code == 0 and "completes, as the original did" in result.stdout
    fork_id = result.stdout.split("-> ")[1].split()[0]
    result = runner.invoke(app, ["diff", run.run_id, fork_id, "--db", store_url])
    # the fork on another model completes like the original: only model identity differs
    assert result.exit_code == 0, result.output
    assert "same behaviour" in result.stdout and "=5 ~0 !0 -0 +0" in result.stdout
    result = runner.invoke(app, ["regress", "none", "--model-version", "x", "--db", store_url])
    assert result.exit_code == 1 and "no regression set 'none'" in result.stderr


def test_replay_never_sleeps_or_calls_the_model(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    write_scenario(folder, steps=3, wall_latency_ms=5)
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    original = start_run(
        store, get_scenario("drill"), instance_id="case-1", model_version="sim-v1", seed=1
    )
    import steplog.harness.runner as runner_module
    from steplog.harness.simulated import SimulatedModel, SimulatedTools

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("replay went live")

    monkeypatch.setattr(runner_module.time, "sleep", forbidden)
    monkeypatch.setattr(SimulatedModel, "complete", forbidden)
    monkeypatch.setattr(SimulatedTools, "call", forbidden)
    assert replay(store, original.run_id).identical


def test_bench_replay_reports_the_ratio_to_reading() -> None:
    result = runner.invoke(app, ["bench", "replay", "--runs", "2", "--json"])
    assert result.exit_code == 0, result.stdout
    report = json.loads(result.stdout)
    assert report["identical"] == 2 and report["events_per_run"] > 100
    assert report["ratio_to_read"] == pytest.approx(
        report["replay_seconds_per_run"] / report["read_seconds_per_run"]
    )


def test_labels_and_set_membership_do_not_make_a_replay_differ(store: EventStore) -> None:
    sandbox = get_scenario("sandbox")
    execute_all(store.url, plan_runs(sandbox, model_version="sim-v1", runs=10, seed=0))
    refresh(store)
    failed = list_runs(store, status="failed", limit=1)[0].run_id
    from steplog.annotations import label

    label(store, failed, label="looked at")
    add_to_regression_set(store, "s", [failed])
    assert replay(store, failed).identical


def test_a_timed_out_run_replays_identically_and_times_out_again(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    write_scenario(folder, config="timeout_seconds = 0.6")
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    original = start_run(
        store, get_scenario("drill"), instance_id="case-1", model_version="sim-v2", seed=1
    )
    assert original.failure_type == "timeout_seconds"
    assert replay(store, original.run_id).identical
    fork = replay(store, original.run_id, fork_at_step=1, model_version="sim-v2")
    assert fork.status == "aborted"  # the same model from step 1: the same timeout


def test_sdk_runs_of_a_registered_agent_replay_exactly(store: EventStore) -> None:
    from steplog import model_call, record_run, register_agent, rng, step, tool_call
    from steplog import now as clock

    calls = {"model": 0}

    @tool_call("lookup")
    def lookup(key: str) -> dict[str, str]:
        return {"key": key, "value": key.upper()}

    @model_call("my-model")
    def ask(prompt: str) -> dict[str, object]:
        calls["model"] += 1
        return {"answer": f"{prompt}!", "usage": {"input_tokens": 3, "output_tokens": 1}}

    @register_agent("support-bot", version="2")
    def support_bot(question: str) -> dict[str, object]:
        with step("lookup") as s:
            s.output = lookup(question)
        with step("answer") as s:
            tone = rng().choice(["formal", "casual"])
            s.output = ask(f"{question} ({tone}) at {clock():.0f}")
            return dict(s.output)

    with record_run(
        "support",
        model_version="my-model",
        agent="support-bot",
        agent_version="2",
        input={"question": "refund"},
        store=store,
        seed=5,
    ) as run:
        run.output = support_bot("refund")
    assert calls["model"] == 1
    result = replay(store, run.run_id)
    assert result.identical, (result.summary, result.first_difference)
    assert calls["model"] == 1  # served from the recording: the model was not called again

    @register_agent("support-bot", version="2")
    def changed(question: str) -> dict[str, object]:
        with step("lookup") as s:
            s.output = lookup(question + "-v2")  # a different request
        return {}

    diverged = replay(store, run.run_id)
    assert diverged.divergence is not None and diverged.divergence["step_index"] == 0
    assert "ToolCalled(lookup" in diverged.divergence["expected"]
    with pytest.raises(RunStateError, match="not registered in this process"):
        with record_run("x", model_version="v", agent="nobody", store=store) as other:
            pass
        replay(store, other.run_id)
