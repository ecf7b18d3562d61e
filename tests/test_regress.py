"""Regress as a regression gate: a control arm and a paired comparison on the real 2x2,
reruns kept out of the evidence, fork points that can change the outcome, fork guards, and
a scenario registry keyed by (name, version)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from helpers.scenarios import write_scenario
from typer.testing import CliRunner

from steplog.annotations import add_to_regression_set
from steplog.cli import app
from steplog.compare import load_runs
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.fork_point import fork_point
from steplog.harness.runner import RunStateError, fold_run, start_run
from steplog.harness.scenario import ScenarioError, get_scenario, registered_scenarios
from steplog.projections.queries import list_failures, list_runs, metrics, refresh, run_summary
from steplog.recorder.divergence import ForkPointError
from steplog.regress import arm_seed, regress
from steplog.replay import ReplayResult, replay
from steplog.resources import seed_scenarios_dir
from steplog.store import EventStore

runner = CliRunner()


def _failed_set(store: EventStore, version: str, runs: int, name: str = "gate") -> list[str]:
    sandbox = get_scenario("sandbox")
    execute_all(store.url, plan_runs(sandbox, model_version=version, runs=runs, seed=11))
    refresh(store)
    failed = [r.run_id for r in list_runs(store, status="failed", limit=1000)]
    assert failed, "the seed gives failures to work with"
    add_to_regression_set(store, name, failed)
    return failed


# --- the control arm and the paired table ----------------------------------------------------


def test_control_arm_paired_table_is_the_hand_counted_2x2(store: EventStore) -> None:
    failed = _failed_set(store, "sim-v1", 40)
    result = regress(store, "gate", model_version="uniform-0.2")
    assert result["samples"] == result["compared"] == len(failed)
    counts = {"both": 0, "candidate_only": 0, "baseline_only": 0, "neither": 0}
    for row in result["results"]:
        original = fold_run(store, row["original"])
        control = fold_run(store, row["control"]["run_id"])
        candidate = fold_run(store, row["candidate"]["run_id"])
        # the control is the original version, the candidate the new one; both from the same
        # fork step with the same (fresh) seed
        assert control.model_version == original.model_version == "sim-v1"
        assert candidate.model_version == "uniform-0.2"
        assert control.seed == candidate.seed == arm_seed(original) != original.seed
        assert control.fork_step == candidate.fork_step == row["fork_step"]
        assert control.forked_from == candidate.forked_from == original.run_id
        c_ok, k_ok = candidate.status == "completed", control.status == "completed"
        key = {(1, 1): "both", (1, 0): "candidate_only", (0, 1): "baseline_only"}.get(
            (int(c_ok), int(k_ok)), "neither"
        )
        counts[key] += 1
    paired = result["paired"]
    assert {k: paired[k] for k in counts} == counts
    n, b, c = len(failed), counts["candidate_only"], counts["baseline_only"]
    assert paired["estimate"] == pytest.approx((b - c) / n)
    # Tango's score test at 0 is McNemar's z = (b - c) / sqrt(b + c), two-sided
    z = (b - c) / math.sqrt(b + c) if b + c else 0.0
    assert paired["p_value"] == pytest.approx(math.erfc(abs(z) / math.sqrt(2)))
    low, high = paired["ci"]
    assert low <= paired["estimate"] <= high
    assert (paired["p_value"] < 0.05) == (low > 0 or high < 0)  # one family: they agree
    assert result["now_pass"] == counts["both"] + b
    assert result["control_pass"] == counts["both"] + c
    assert f"{result['now_pass']}/{n} samples" in result["verdict"]
    assert "Tango score" in result["verdict"]


def test_a_worse_version_gets_no_small_p_in_its_favour(store: EventStore) -> None:
    failed = _failed_set(store, "sim-v2", 80)
    sandbox = get_scenario("sandbox")
    execute_all(store.url, plan_runs(sandbox, model_version="uniform-0.3", runs=80, seed=11))
    refresh(store)
    base, cand = load_runs(store, "sim-v2", "uniform-0.3", "sandbox")
    assert cand.completed.mean() < base.completed.mean() - 0.15  # worse by compare's data
    result = regress(store, "gate", model_version="uniform-0.3")
    paired = result["paired"]
    # before: PairedTable(both=0, candidate_only=passed, ...): p = 0.5^passed, "in favour"
    assert paired["baseline_only"] > 0 and paired["both"] + paired["baseline_only"] > 0
    assert paired["estimate"] < 0
    assert paired["ci"][0] < 0
    # a small p here speaks against the candidate, and the sentence says so
    assert paired["p_value"] < 0.05 and paired["ci"][1] < 0
    assert "uniform-0.3 fixes fewer of them" in result["verdict"]
    assert result["samples"] == len(failed)


def test_fix_rate_per_failure_signature_has_a_wilson_interval(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    completion = '[completion]\ncheck = "field_accuracy"\nthreshold = 1.0\n'
    write_scenario(folder, completion=completion, base_error=0.15, silent_error_rate=0.1)
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    execute_all(
        store.url, plan_runs(get_scenario("drill"), model_version="sim-v1", runs=40, seed=2)
    )
    refresh(store)
    failed = [r.run_id for r in list_runs(store, status="failed", limit=1000)]
    add_to_regression_set(store, "gate", failed)
    result = regress(store, "gate", model_version="sim-v2")  # sim-v2 never fails
    groups = result["by_signature"]
    assert sum(g["samples"] for g in groups) == result["compared"]
    assert len({g["signature"] for g in groups}) == len(groups) > 1
    for group in groups:
        rows = [r for r in result["results"] if r["signature"] == group["signature"]]
        assert group["samples"] == len(rows)
        assert group["fixed"] == sum(r["candidate"]["passed"] for r in rows) == len(rows)
        rate = group["fix_rate"]
        assert rate["method"] == "wilson" and rate["n"] == len(rows)
        # Wilson for x = n: upper 1, lower n / (n + z^2)
        z2 = 1.959963984540054**2
        assert rate["ci"][0] == pytest.approx(len(rows) / (len(rows) + z2))
    assert result["fix_rate"]["estimate"] == 1.0
    # a step failure after an output the completion criterion already counts wrong forks there
    assert any("already counts" in r["fork_reason"] for r in result["results"])


# --- reruns are linked and are not evidence --------------------------------------------------


def _evidence(store: EventStore) -> tuple[object, ...]:
    refresh(store)
    base, cand = load_runs(store, "sim-v1", "uniform-0.0", "sandbox")
    failures = sorted((f.signature, f.count, tuple(sorted(f.counts_by_version.items())))
                      for f in list_failures(store, limit=1000))  # fmt: skip
    return (
        [m.as_dict() for m in metrics(store, scenario="sandbox")],
        len(base.completed),
        len(cand.completed),
        failures,
    )


@pytest.mark.parametrize("mode", ["rerun", "fork"])
def test_regress_runs_stay_out_of_metrics_comparisons_and_failures(
    store: EventStore, mode: str
) -> None:
    _failed_set(store, "sim-v1", 30)
    execute_all(
        store.url, plan_runs(get_scenario("sandbox"), model_version="uniform-0.0", runs=4, seed=1)
    )
    before = _evidence(store)
    result = regress(store, "gate", model_version="uniform-0.0", mode=mode)  # type: ignore[arg-type]
    assert result["control_pass"] < result["compared"]  # the control arm fails some again
    assert _evidence(store) == before
    row = result["results"][0]
    summary = run_summary(store, row["candidate"]["run_id"])
    assert summary is not None
    if mode == "rerun":
        assert summary.rerun_of == row["original"] and summary.forked_from is None
        assert row["fork_step"] is None and row["fork_reason"] == "rerun from the start"
    else:
        assert summary.forked_from == row["original"]


# --- where to fork ---------------------------------------------------------------------------


def test_run_level_criterion_forks_at_the_first_step_it_counts_wrong(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    completion = '[completion]\ncheck = "field_accuracy"\nthreshold = 1.0\n'
    write_scenario(folder, steps=5, completion=completion, silent_error_rate=0.3)
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    spec = get_scenario("drill")
    outcomes = execute_all(store.url, plan_runs(spec, model_version="sim-v1", runs=12, seed=3))
    failed = [o.run_id for o in outcomes if o.failure_type == "completion_criterion"]
    assert failed
    last = len(spec.steps_for(spec.instance("case-1"))) - 1
    for run_id in failed:
        state = fold_run(store, run_id)
        assert state.failure_step_index == last  # recorded at the end ...
        point = fork_point(state, spec)
        assert point.step < last  # ... but forked where the first wrong output was made
        assert f"step {point.step}" in point.reason and "counts wrong" in point.reason
    refresh(store)
    add_to_regression_set(store, "silent", failed)
    result = regress(store, "silent", model_version="sim-v2")  # sim-v2 never errs
    assert result["now_pass"] == len(failed)  # forked at the last step it would be 0
    for row in result["results"]:
        assert row["fork_step"] < last and "counts wrong" in row["fork_reason"]
    code, out = _cli(["regress", "silent", "--model-version", "sim-v2", "--db", store.url])
    assert code == 0 and "counts wrong" in out and "fix rate" in out


def test_fork_after_the_failure_step_is_refused(store: EventStore) -> None:
    failed = _failed_set(store, "sim-v1", 30)
    state = next(
        s
        for s in (fold_run(store, r) for r in failed)
        if s.failure_step_index is not None and s.failure_step_index + 1 < len(s.planned_steps)
    )
    stop = state.failure_step_index
    assert stop is not None
    with pytest.raises(ForkPointError, match=f"stopped at step {stop} .*fork at a step from 0"):
        replay(store, state.run_id, fork_at_step=stop + 1, model_version="sim-v2")
    before = store.last_position()
    code, out = _cli(
        ["replay", state.run_id, "--fork-at-step", str(stop + 1), "--model-version", "sim-v2"],
        store,
    )
    assert code == 1 and "Traceback" not in out and f"stopped at step {stop}" in out
    assert store.last_position() == before  # refused before writing
    assert replay(store, state.run_id, fork_at_step=stop, model_version="sim-v2").fork_step == stop


def test_fork_at_step_zero_serves_the_start_clock(store: EventStore) -> None:
    original = start_run(
        store, get_scenario("sandbox"), instance_id="chain-5", model_version="sim-v1", seed=4
    )
    fork = replay(store, original.run_id, fork_at_step=0, model_version="sim-v2")

    def start_clock(run_id: str) -> float:
        first = next(e for e in store.read_run(run_id) if e.type == "ClockRead")
        return float(first.payload["value"])

    assert start_clock(fork.run_id) == start_clock(original.run_id)
    assert fork.divergence is None


def test_fork_summary_does_not_claim_a_fix_the_original_did_not_need(store: EventStore) -> None:
    sandbox = get_scenario("sandbox")
    done = start_run(store, sandbox, instance_id="chain-3", model_version="uniform-0.0", seed=1)
    assert done.status == "completed"
    fork = replay(store, done.run_id, fork_at_step=1, model_version="sim-v2")
    assert fork.status == "completed"
    assert "now completes" not in fork.summary
    assert fork.summary.endswith("completes, as the original did")

    def summary(original: str, status: str) -> str:
        return ReplayResult(
            mode="fork",
            original="a",
            run_id="b",
            status=status,
            original_status=original,
            identical=None,
            divergence=None,
            first_difference=None,
            fork_step=1,
            model_version="v",
        ).summary.split(" -- ")[1]

    assert summary("failed", "completed") == "now completes"
    assert summary("failed", "failed") == "still fails"
    assert summary("completed", "failed") == "no longer completes (the original did)"
    assert summary("aborted", "aborted") == "still does not complete"


# --- scenarios by (name, version) ------------------------------------------------------------


def test_a_version_bump_keeps_older_runs_replayable(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    path = write_scenario(folder, steps=3, base_error=0.4)
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    spec = get_scenario("drill")
    old_runs = execute_all(store.url, plan_runs(spec, model_version="sim-v1", runs=10, seed=5))
    old_failed = [o.run_id for o in old_runs if o.status != "completed"]
    assert old_failed
    # bump: version 2 changes the steps; version 1 kept as its own file
    shutil.copy(path, folder / "drill.v1.toml")
    text = path.read_text().replace('version = "1"', 'version = "2"')
    path.write_text(text.replace("repeat = 3", "repeat = 4"))
    assert get_scenario("drill").version == "2"  # new runs use the newest version
    assert get_scenario("drill", "1").version == "1"
    for outcome in old_runs[:4]:
        assert replay(store, outcome.run_id).identical
    refresh(store)
    add_to_regression_set(store, "old", old_failed)
    result = regress(store, "old", model_version="sim-v2")  # not refused
    assert result["now_pass"] == len(old_failed)
    new = start_run(store, get_scenario("drill"), instance_id="case-1", model_version="sim-v1")
    assert new.agent_version == "2" and len(new.planned_steps) == 5
    # without the old file, the error says which version is missing and how to keep it
    (folder / "drill.v1.toml").unlink()
    with pytest.raises(RunStateError, match=r"no registered version '1' \(registered: 2\)"):
        replay(store, old_runs[0].run_id)
    code, out = _cli(["scenarios", "--json"])
    assert code == 0
    entry = next(s for s in json.loads(out)["scenarios"] if s["name"] == "drill")
    assert entry["version"] == "2" and [v["version"] for v in entry["versions"]] == ["2"]


def test_scenario_name_clash_between_folders_names_both_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    seeded = seed_scenarios_dir() / "sandbox.toml"
    (folder / "my-sandbox.toml").write_text(seeded.read_text())
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    with pytest.raises(ScenarioError) as caught:
        registered_scenarios()
    message = str(caught.value)
    assert str(seeded) in message and str(folder / "my-sandbox.toml") in message
    assert "'sandbox' version 1 is defined twice" in message
    code, out = _cli(["scenarios"])
    assert code == 1 and "defined twice" in out and "Traceback" not in out
    # another version of the same name is not a clash: both are listed
    (folder / "my-sandbox.toml").write_text(
        seeded.read_text().replace('version = "1"', 'version = "2"')
    )
    assert get_scenario("sandbox").version == "2"
    code, out = _cli(["scenarios", "--json"])
    entry = next(s for s in json.loads(out)["scenarios"] if s["name"] == "sandbox")
    assert [v["version"] for v in entry["versions"]] == ["2", "1"]


def _cli(args: list[str], store: EventStore | None = None) -> tuple[int, str]:
    if store is not None:
        args = [*args, "--db", store.url]
    result = runner.invoke(app, args)
    return result.exit_code, result.stdout + result.stderr
