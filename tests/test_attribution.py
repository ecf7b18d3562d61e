"""Counterfactual attribution: rescue-rate intervals, the search rule (decisive step, plateau,
not rescuable, never after the failure), accuracy on planted failures, refusals and the CLI."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steplog.attribution import RescuePoint, above, attribute, fork_seed, locate
from steplog.cli import app
from steplog.errors import SteplogError
from steplog.events import RunFailed, RunStarted
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.runner import RunStateError, fold_run
from steplog.harness.scenario import ENV_SCENARIOS, ScenarioError, get_scenario
from steplog.harness.simulated import planted_step
from steplog.projections.queries import list_runs, refresh
from steplog.replay import replay
from steplog.resources import data_dir
from steplog.store import EventStore

runner = CliRunner()


# --- rescue rates and the significance rule --------------------------------------------------


@pytest.mark.parametrize(
    ("rescued", "forks", "low", "high"),
    [  # Newcombe (1998), Statistics in Medicine 17:857, Table I, method 3 (Wilson score)
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_rescue_rate_interval_is_wilsons(rescued: int, forks: int, low: float, high: float) -> None:
    point = RescuePoint(step=3, rescued=rescued, forks=forks)
    interval = point.interval
    assert interval.method == "wilson"
    assert interval.estimate == pytest.approx(rescued / forks)
    assert (round(interval.low, 4), round(interval.high, 4)) == (low, high)
    shown = point.as_dict()
    assert shown["ci"] == [interval.low, interval.high] and shown["forks"] == forks


def test_significantly_above_the_rate_after_it() -> None:
    # By hand: Wilson 95% for 4/10 is [0.1682, 0.6873], for 0/10 [0, 0.2775]; Newcombe's lower
    # limit 0.4 - sqrt(0.2318^2 + 0.2775^2) = 0.0384 > 0. For 3/10 ([0.1078, 0.6032]):
    # 0.3 - sqrt(0.1922^2 + 0.2775^2) = -0.0376 < 0: not significant.
    zero = RescuePoint(step=8, rescued=0, forks=10)
    assert above(RescuePoint(step=7, rescued=4, forks=10), zero)
    assert not above(RescuePoint(step=7, rescued=3, forks=10), zero)
    assert above(
        RescuePoint(step=7, rescued=10, forks=10), RescuePoint(step=8, rescued=2, forks=10)
    )
    assert not above(
        RescuePoint(step=7, rescued=5, forks=10), RescuePoint(step=8, rescued=5, forks=10)
    )
    # past the failure step the rate is exactly 0: one completed fork settles it
    assert above(RescuePoint(step=29, rescued=1, forks=10), None)
    assert not above(RescuePoint(step=29, rescued=0, forks=10), None)


# --- the search on synthetic curves ----------------------------------------------------------


def _curve(rates: dict[int, float], seed: int) -> tuple[dict[tuple[int, int], bool], object]:
    """A fork function: step j completes with probability rates.get(j, 0), reproducibly."""
    calls: dict[tuple[int, int], bool] = {}

    def fork(step: int, sample: int) -> bool:
        assert (step, sample) not in calls, "the same fork was run twice"
        outcome = random.Random(f"{seed}:{step}:{sample}").random() < rates.get(step, 0.0)
        calls[(step, sample)] = outcome
        return outcome

    return calls, fork


@pytest.mark.parametrize("failure", [0, 1, 7, 29])
def test_a_step_function_is_located_exactly_and_cheaper_than_a_scan(failure: int) -> None:
    for planted in range(failure + 1):
        for seed in range(3):
            rates = dict.fromkeys(range(planted + 1), 0.9)
            calls, fork = _curve(rates, seed)
            found = locate(fork, failure, forks=10)  # type: ignore[arg-type]
            assert found.verdict == "decisive", (planted, seed, found)
            assert found.decisive_step == planted
            assert found.forks_spent == len(calls)
            point = {p.step: p for p in found.curve}
            assert point[planted].forks == 10  # the decisive step's rate has a full sample
            if planted < failure:
                assert point[planted + 1] == RescuePoint(step=planted + 1, rescued=0, forks=10)
            scanned = locate(_curve(rates, seed)[1], failure, forks=10, scan=True)  # type: ignore[arg-type]
            assert scanned.decisive_step == planted
            assert scanned.forks_spent == (failure + 1) * 10
    assert found.forks_spent < scanned.forks_spent or failure == 0


def test_a_plateau_is_reported_as_one() -> None:
    # Rescued surely up to step 3, rarely (1 in 5) at 4..7, never after: no single step is
    # significantly above the one after it at 7, so the answer is the plateau 3..7.
    def fork(step: int, sample: int) -> bool:
        return step <= 3 or (step <= 7 and sample % 5 == 0)

    found = locate(fork, 12, forks=10)
    assert found.verdict == "plateau"
    assert found.plateau == (3, 7)
    assert found.decisive_step is None
    assert found.last_rescuable == 7


def test_not_rescuable_when_no_fork_completes_or_none_significantly() -> None:
    never = locate(lambda step, sample: False, 29, forks=10)
    assert never.verdict == "not_rescuable" and never.decisive_step is None
    assert never.last_rescuable is None
    assert {p.step for p in never.curve} >= {0}  # step 0 itself was tried with every fork
    assert next(p for p in never.curve if p.step == 0) == RescuePoint(step=0, rescued=0, forks=10)
    # one lucky fork in ten at each step up to 5 is never significantly above the rate after it
    weak = locate(lambda step, sample: step <= 5 and sample == 0, 20, forks=10)
    assert weak.verdict == "not_rescuable" and weak.last_rescuable == 5


def test_the_decisive_step_is_never_after_the_failure_step() -> None:
    for seed in range(60):
        rng = random.Random(seed)
        failure = rng.randrange(30)
        rates = {j: rng.choice([0.0, 0.2, 0.6, 1.0]) for j in range(40)}  # not even monotone
        calls, fork = _curve(rates, seed)
        found = locate(fork, failure, forks=rng.choice([1, 4, 10]))  # type: ignore[arg-type]
        assert all(step <= failure for step, _ in calls)
        if found.decisive_step is not None:
            assert found.decisive_step <= failure
        if found.plateau is not None:
            assert found.plateau[0] <= found.plateau[1] <= failure


def test_search_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="forks"):
        locate(lambda step, sample: True, 3, forks=0)
    with pytest.raises(ValueError, match="failure_step"):
        locate(lambda step, sample: True, -1)


# --- forks on real runs of the planted scenario ----------------------------------------------


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = data_dir("seeds", "attribution/planted-ledger.toml")
    monkeypatch.setenv(ENV_SCENARIOS, str(folder))
    yield folder


def _failed_planted_runs(store: EventStore, count: int) -> list[tuple[str, int]]:
    spec = get_scenario("planted-ledger")
    outcomes = execute_all(
        store.url, plan_runs(spec, model_version="sim-planted", runs=count + 2, seed=11)
    )
    found = []
    for outcome in outcomes:
        if outcome.failure_type == "completion_criterion":
            state = fold_run(store, outcome.run_id)
            truth = planted_step(
                "sim-planted", spec.model("sim-planted"), state.seed, state.task_instance_id or ""
            )
            found.append((outcome.run_id, truth))
    return found[:count]


def test_forks_with_a_seed_differ_and_stay_replayable(store: EventStore, planted: Path) -> None:
    run_id, _ = _failed_planted_runs(store, 1)[0]
    forks = [
        replay(store, run_id, fork_at_step=0, model_version="sim-weak", seed=fork_seed(5, 0, i))
        for i in range(4)
    ]
    seeds = {fold_run(store, f.run_id).seed for f in forks}
    assert seeds == {fork_seed(5, 0, i) for i in range(4)}
    futures = {tuple(e.type for e in store.read_run(f.run_id)) for f in forks}
    assert len(futures) > 1  # different futures: their retries and failures differ
    again = replay(store, forks[0].run_id)
    assert again.identical, again.summary
    with pytest.raises(SteplogError, match="--fork-at-step"):
        replay(store, run_id, seed=3)


def test_attribution_finds_the_planted_step(store: EventStore, planted: Path) -> None:
    runs = _failed_planted_runs(store, 3)
    assert len(runs) == 3
    for run_id, truth in runs:
        state = fold_run(store, run_id)
        assert state.failure_step_index == 29  # surfaced at the end, not where it was made
        found = attribute(store, run_id, rescuer="sim-strong", forks=8)
        assert found.verdict == "decisive", found.summary
        assert found.decisive_step == truth
        assert found.decisive_step <= found.failure_step
        assert found.located.forks_spent < found.exhaustive_cost
        report = found.as_dict()
        assert report["decisive_step"] == truth and report["forks_spent"] > 0
    # the forks are forks: linked by session, kept out of the run list's counts
    refresh(store)
    session = f"attribute:{runs[0][0]}:sim-strong"
    listed = list_runs(store, session=session, limit=1000)
    assert listed and all(r.forked_from == runs[0][0] for r in listed)
    assert all(r.model_version == "sim-strong" for r in listed)


def test_attribution_refuses_bad_input(store: EventStore, planted: Path, tmp_path: Path) -> None:
    with pytest.raises(RunStateError, match="no run 'nope'"):
        attribute(store, "nope", rescuer="sim-strong")
    run_id, _ = _failed_planted_runs(store, 1)[0]
    with pytest.raises(ScenarioError, match="no model version 'sim-9'"):
        attribute(store, run_id, rescuer="sim-9")
    with pytest.raises(SteplogError, match="at least 1"):
        attribute(store, run_id, rescuer="sim-strong", forks=0)
    spec = get_scenario("sandbox")
    done = execute_all(store.url, plan_runs(spec, model_version="uniform-0.0", runs=1, seed=1))
    with pytest.raises(RunStateError, match="completed: there is no failure"):
        attribute(store, done[0].run_id, rescuer="sim-v2")
    store.append(
        "imported-1",
        [
            RunStarted(scenario="planted-ledger", model_version="gpt-x", agent="a", source="otlp"),
            RunFailed(step="post_01", step_index=0, error_type="model_error", message="boom"),
        ],
        expected_version=0,
    )
    with pytest.raises(SteplogError, match="recorded by 'otlp', not the harness"):
        attribute(store, "imported-1", rescuer="sim-strong")


def test_attribute_cli(store_url: str, planted: Path) -> None:
    store = EventStore.open(store_url)
    spec = get_scenario("sandbox")
    outcomes = execute_all(store.url, plan_runs(spec, model_version="sim-v1", runs=12, seed=3))
    failed = next(o for o in outcomes if o.status == "failed")
    failure = fold_run(store, failed.run_id).failure_step_index
    store.close()
    result = runner.invoke(
        app,
        [
            "attribute",
            failed.run_id,
            "--rescuer",
            "uniform-0.0",
            "--forks",
            "3",
            "--db",
            store_url,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    # the sandbox has no retries: the step that failed is the one that decided, and a model that
    # never fails rescues every fork there
    assert report["verdict"] == "decisive" and report["decisive_step"] == failure
    assert report["failure_step"] == failure
    shown = runner.invoke(
        app, ["attribute", failed.run_id, "--rescuer", "uniform-0.0", "--db", store_url]
    )
    assert shown.exit_code == 0 and f"decisive step {failure}" in shown.output
    bad = runner.invoke(app, ["attribute", failed.run_id, "--rescuer", "gpt-9", "--db", store_url])
    assert bad.exit_code == 1 and "no model version 'gpt-9'" in bad.output
    missing = runner.invoke(
        app, ["attribute", "no-such-run", "--rescuer", "sim-v2", "--db", store_url]
    )
    assert missing.exit_code == 1 and "no run 'no-such-run'" in missing.output


def test_bench_attribute_small() -> None:
    from steplog.bench.attribute import run_attribute_benchmark

    result = run_attribute_benchmark(runs=3, forks=6, scan_runs=1)
    report = result.as_dict()
    assert result.runs == 3
    assert result.correct == 3  # the planted scenario's curve is a clean step
    assert result.mean_forks < result.scan_mean_forks
    assert report["accuracy"]["method"] == "wilson" and result.scan_correct == 1
