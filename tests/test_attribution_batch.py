"""Batch attribution (--signature, --set), attributions read back from their recorded forks,
the decisive-step histogram against planted steps, and regress --fork-at decisive."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steplog.annotations import add_to_regression_set
from steplog.attribution import attribute, locate
from steplog.attribution.batch import (
    attribute_many,
    histogram,
    recorded_histogram,
    runs_of_set,
    runs_of_signature,
)
from steplog.attribution.curve import RescuePoint
from steplog.attribution.readback import (
    RecordedFork,
    attribution_of,
    attributions_of,
    fold_forks,
    judge,
)
from steplog.cli import app
from steplog.errors import SteplogError
from steplog.events import RunFailed, RunStarted
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.runner import fold_run
from steplog.harness.scenario import ENV_SCENARIOS, get_scenario
from steplog.harness.simulated import planted_step
from steplog.projections.queries import refresh, related_runs, run_summary
from steplog.regress import regress
from steplog.resources import data_dir
from steplog.store import EventStore

runner = CliRunner()


# --- the pure fold ---------------------------------------------------------------------------


def _recording(
    seed: int, rates: dict[int, float], recorded: list[RecordedFork]
) -> Callable[[int, int], bool]:
    def fork(step: int, sample: int) -> bool:
        done = random.Random(f"{seed}:{step}:{sample}").random() < rates[step]
        recorded.append(RecordedFork(step, 1000 * step + sample, done))
        return done

    return fork


def test_judge_of_the_recorded_forks_is_the_search_answer() -> None:
    """For random curves (monotone or not, any M), folding what the search forked and judging
    it gives exactly the search's answer: verdict, step, plateau, curve and forks spent."""
    for seed in range(200):
        rng = random.Random(seed)
        failure = rng.randrange(25)
        rates = {j: rng.choice([0.0, 0.1, 0.3, 0.7, 1.0]) for j in range(30)}
        if rng.random() < 0.5:  # a clean step function now and then
            cut = rng.randrange(failure + 1)
            rates = {j: (0.9 if j <= cut else 0.0) for j in range(30)}
        recorded: list[RecordedFork] = []
        fork = _recording(seed, rates, recorded)
        scan = rng.random() < 0.2
        found = locate(fork, failure, forks=rng.choice([1, 3, 6, 10]), scan=scan)
        rebuilt = judge(fold_forks(recorded), failure)
        assert rebuilt == found, (seed, found, rebuilt)


def test_a_repeated_fork_counts_once() -> None:
    forks = [
        RecordedFork(3, 11, True),
        RecordedFork(3, 11, True),  # the same fork again (a second attribution)
        RecordedFork(3, 12, False),
        RecordedFork(4, 11, False),
    ]
    assert fold_forks(forks) == (
        RescuePoint(step=3, rescued=1, forks=2),
        RescuePoint(step=4, rescued=0, forks=1),
    )
    assert fold_forks([]) == ()
    assert judge((), 5).verdict == "not_rescuable"


def test_a_missing_rate_after_the_last_rescued_step_is_not_significance() -> None:
    # an interrupted attribution: rescued at 2, nothing recorded at 3 -- no claim of decisiveness
    found = judge((RescuePoint(step=2, rescued=5, forks=5),), 9)
    assert found.verdict == "not_rescuable" and found.last_rescuable == 2


# --- real runs of the planted scenario -------------------------------------------------------


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = data_dir("seeds", "attribution/planted-ledger.toml")
    monkeypatch.setenv(ENV_SCENARIOS, str(folder))
    yield folder


def _planted_failures(store: EventStore, count: int) -> dict[str, int]:
    """``count`` failed planted runs with their planted (true) decisive steps."""
    spec = get_scenario("planted-ledger")
    outcomes = execute_all(
        store.url, plan_runs(spec, model_version="sim-planted", runs=count + 3, seed=21)
    )
    truth = {}
    for outcome in outcomes:
        if outcome.failure_type == "completion_criterion" and len(truth) < count:
            state = fold_run(store, outcome.run_id)
            truth[outcome.run_id] = planted_step(
                "sim-planted", spec.model("sim-planted"), state.seed, state.task_instance_id or ""
            )
    assert len(truth) == count
    return truth


def test_batch_over_a_signature_against_planted_steps(store: EventStore, planted: Path) -> None:
    truth = _planted_failures(store, 4)
    refresh(store)
    signature = run_summary(store, next(iter(truth))).signature  # type: ignore[union-attr]
    runs = runs_of_signature(store, signature[:8])
    assert {r.run_id for r in runs} >= set(truth)
    runs = [r for r in runs if r.run_id in truth]
    seen: list[tuple[int, int, str]] = []
    results = attribute_many(
        store,
        runs,
        rescuer="sim-strong",
        forks=6,
        where="test",
        progress=lambda done, total, run: seen.append((done, total, run)),
    )
    assert seen[0] == (0, 4, runs[0].run_id) and seen[-1] == (4, 4, "")
    assert {a.run_id: a.decisive_step for a in results} == truth
    assert all(a.forks_reused == 0 for a in results)
    [group] = histogram(results, runs)
    assert group.signature == signature and group.runs == 4 and group.decisive == 4
    decisive = {row.step: row.decisive for row in group.steps if row.decisive}
    failure = {row.step: row.failure for row in group.steps if row.failure}
    assert decisive == dict(Counter(truth.values()))
    assert failure == {29: 4}  # every planted error surfaces at the last step
    assert group.decided_before_failure == sum(1 for t in truth.values() if t < 29)
    # read back from the log: the same curves, no forking
    back = attributions_of(store, list(truth))
    for found in results:
        [again] = back[found.run_id]
        call_only = ("forks_new", "probed_steps")  # what one call did, not in the log
        assert {k: v for k, v in again.as_dict().items() if k not in call_only} == {
            k: v for k, v in found.as_dict().items() if k not in call_only
        }
    assert recorded_histogram(store, signature) == group
    # a repeated batch reads every fork back: no new fork runs
    before = store.last_position()
    repeated = attribute_many(store, runs, rescuer="sim-strong", forks=6, where="test")
    assert store.last_position() == before
    assert [a.forks_reused for a in repeated] == [a.located.forks_spent for a in results]
    assert [a.located for a in repeated] == [a.located for a in results]


def test_readback_curve_equals_the_attribute_run(store: EventStore, planted: Path) -> None:
    run_id = next(iter(_planted_failures(store, 1)))
    assert attribution_of(store, run_id) is None
    found = attribute(store, run_id, rescuer="sim-strong", forks=5)
    weak = attribute(store, run_id, rescuer="sim-weak", forks=2)
    back = attribution_of(store, run_id, rescuer="sim-strong")
    assert back is not None
    assert back.located.curve == found.located.curve
    call_only = ("forks_new", "probed_steps")  # what one call did, not in the log
    assert {k: v for k, v in back.as_dict().items() if k not in call_only} == {
        k: v for k, v in found.as_dict().items() if k not in call_only
    }
    assert attribution_of(store, run_id, rescuer="sim-weak").located == weak.located  # type: ignore[union-attr]
    # a second attribution with more forks pools with the first: one curve, repeated forks once
    more = attribute(store, run_id, rescuer="sim-strong", forks=8)
    pooled = attribution_of(store, run_id, rescuer="sim-strong")
    assert pooled is not None and pooled.located == more.located


# --- the CLI: batch over a set and a signature, error paths ----------------------------------


def _sandbox_failures(store_url: str, count: int) -> list[str]:
    store = EventStore.open(store_url)
    spec = get_scenario("sandbox")
    outcomes = execute_all(store.url, plan_runs(spec, model_version="sim-v1", runs=16, seed=5))
    failed = [o.run_id for o in outcomes if o.status == "failed"][:count]
    store.close()
    assert len(failed) == count
    return failed


def test_batch_cli_over_a_set_and_a_signature(store_url: str) -> None:
    failed = _sandbox_failures(store_url, 3)
    store = EventStore.open(store_url)
    add_to_regression_set(store, "nightly", failed)
    refresh(store)
    signature = run_summary(store, failed[0]).signature  # type: ignore[union-attr]
    failures = {r: fold_run(store, r).failure_step_index for r in failed}
    store.close()
    common = ["--rescuer", "uniform-0.0", "--forks", "2", "--db", store_url]
    result = runner.invoke(app, ["attribute", "--set", "nightly", *common, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["source"] == {"set": "nightly"}
    # the sandbox has no retries: the failed step decided, and a never-failing model rescues it
    assert {r["run_id"]: r["decisive_step"] for r in report["runs"]} == failures
    assert sum(g["runs"] for g in report["histogram"]) == 3
    for group in report["histogram"]:
        assert all(row["decisive"] == row["failure"] for row in group["steps"])
    shown = runner.invoke(app, ["attribute", "--signature", signature, *common])
    assert shown.exit_code == 0, shown.output
    assert "decisive" in shown.output and failed[0] in shown.output
    assert "read back from earlier attributions" in shown.output


def test_batch_cli_refuses_bad_input(store_url: str) -> None:
    failed = _sandbox_failures(store_url, 1)
    store = EventStore.open(store_url)
    store.append(
        "imported-1",
        [
            RunStarted(scenario="sandbox", model_version="gpt-x", agent="a", source="otlp"),
            RunFailed(step="step_01", step_index=0, error_type="model_error", message="boom"),
        ],
        expected_version=0,
    )
    add_to_regression_set(store, "mixed", [failed[0], "imported-1"])
    store.close()
    common = ["--rescuer", "uniform-0.0", "--db", store_url]
    cases = {
        ("attribute", *common): "exactly one of RUN, --signature SIG or --set NAME",
        ("attribute", failed[0], "--set", "mixed", *common): "(got RUN and --set)",
        ("attribute", "--set", "nope", *common): "no regression set 'nope'",
        ("attribute", "--signature", "ffffffffff", *common): "no failure signature 'ffffffffff'",
        ("attribute", "--set", "mixed", *common): (
            "regression set 'mixed': run 'imported-1' was recorded by 'otlp', not the harness"
        ),
        ("attribute", "--set", "mixed", "--rescuer", "gpt-9", "--db", store_url): (
            "no model version 'gpt-9'"
        ),
    }
    for args, message in cases.items():
        result = runner.invoke(app, list(args))
        assert result.exit_code == 1, (args, result.output)
        assert result.output.startswith("error:") and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    store = EventStore.open(store_url)
    refresh(store)
    assert related_runs(store, failed[0]) == []  # refused before anything was forked
    with pytest.raises(SteplogError, match="at least 1"):
        attribute_many(store, runs_of_set(store, "mixed"), rescuer="x", forks=0, where="t")
    store.close()


# --- regress --fork-at decisive --------------------------------------------------------------


def test_regress_forks_at_the_recorded_decisive_step(store: EventStore, planted: Path) -> None:
    truth = _planted_failures(store, 2)
    attributed, other = list(truth)
    add_to_regression_set(store, "planted", [attributed, other])
    found = attribute(store, attributed, rescuer="sim-strong", forks=4)
    report = regress(store, "planted", model_version="sim-strong", fork_at="decisive")
    rows = {r["original"]: r for r in report["results"]}
    assert report["fork_at"] == "decisive"
    assert rows[attributed]["fork_step"] == found.decisive_step == truth[attributed]
    assert "decisive step" in rows[attributed]["fork_reason"]
    assert rows[other]["fork_reason"].startswith("no recorded attribution")
    earliest = regress(store, "planted", model_version="sim-strong")
    assert {r["original"]: r["fork_step"] for r in earliest["results"]}[other] == rows[other][
        "fork_step"
    ]
    with pytest.raises(SteplogError, match="needs --mode fork"):
        regress(store, "planted", model_version="sim-strong", mode="rerun", fork_at="decisive")


def test_regress_cli_fork_at_refuses_bad_input(store_url: str) -> None:
    failed = _sandbox_failures(store_url, 1)
    store = EventStore.open(store_url)
    add_to_regression_set(store, "one", failed)
    store.close()
    common = ["regress", "one", "--model-version", "uniform-0.0", "--db", store_url]
    bad = runner.invoke(app, [*common, "--fork-at", "sideways"])
    assert bad.exit_code == 2
    assert bad.output.strip().startswith(
        "error: Invalid value for '--fork-at': 'sideways' is not one of 'earliest', 'decisive'."
    )
    assert bad.output.strip().endswith(" regress --help)")  # the command path: steplog regress
    rerun = runner.invoke(app, [*common, "--mode", "rerun", "--fork-at", "decisive"])
    assert rerun.exit_code == 1 and "it needs --mode fork" in rerun.output
    shown = runner.invoke(app, [*common, "--fork-at", "decisive", "--json"])
    assert shown.exit_code == 0, shown.output
    [row] = json.loads(shown.output)["results"]
    assert row["fork_reason"].startswith("no recorded attribution, so at the earliest step")
