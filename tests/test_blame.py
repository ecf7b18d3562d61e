"""Per-agent blame: the significance rule and the rounds on synthetic agents, the planted agent
blamed on the planted-team scenario (SQLite and PostgreSQL), "no single agent", exact replay of a
per-agent fork, refusals and the CLI."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steplog.attribution.blame import AgentPoint, above_all, blame, blame_seed, settle
from steplog.cli import app
from steplog.errors import SteplogError
from steplog.events import RunFailed, RunStarted, catalogue
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.runner import fold_run, start_run
from steplog.harness.scenario import ENV_SCENARIOS, ScenarioError, get_scenario
from steplog.harness.simulated import planted_step
from steplog.projections.queries import list_runs, refresh
from steplog.replay import replay
from steplog.resources import data_dir
from steplog.store import EventStore

runner = CliRunner()
AGENTS = ["planner", "researcher", "coder", "verifier"]


# --- the rule and the rounds -----------------------------------------------------------------


def test_an_agent_is_blamed_when_significantly_above_each_other() -> None:
    # By hand: Wilson 95% for 2/2 is [0.3424, 1], for 0/2 [0, 0.6576]; Newcombe's lower limit of
    # the difference 1 - sqrt(0.6576^2 + 0.6576^2) = 0.0700 > 0. For 1/1 vs 0/1 (Wilson
    # [0.2065, 1] and [0, 0.7935]): 1 - sqrt(2 * 0.7935^2) = -0.1222 < 0, not significant.
    top = AgentPoint(agent="coder", rescued=2, forks=2)
    assert (round(top.interval.low, 4), top.interval.high) == (0.3424, 1.0)
    assert above_all(
        top, [AgentPoint(agent=a, rescued=0, forks=2) for a in ("planner", "verifier")]
    )
    assert not above_all(
        AgentPoint(agent="coder", rescued=1, forks=1),
        [AgentPoint(agent="planner", rescued=0, forks=1)],
    )
    assert not above_all(
        top, [AgentPoint(agent="planner", rescued=1, forks=2)]
    )  # 2/2 vs 1/2: not significant
    assert not above_all(
        AgentPoint(agent="coder", rescued=0, forks=5),
        [AgentPoint(agent="planner", rescued=0, forks=5)],
    )
    assert not above_all(
        top, [AgentPoint(agent="planner", rescued=0, forks=0)]
    )  # nothing measured to compare
    # alone (the only agent acting from the step on): one completed fork settles it, as past
    # the failure step, whose future is the recorded (failed) run
    assert above_all(AgentPoint(agent="coder", rescued=1, forks=3), [])
    shown = AgentPoint(agent="planner", rescued=0, forks=0, acts=False).as_dict()
    assert shown["rate"] is None and shown["ci"] is None and shown["acts"] is False


def _agents(rates: dict[str, float], seed: int) -> tuple[list[tuple[str, int]], object]:
    calls: list[tuple[str, int]] = []

    def fork(agent: str, sample: int) -> bool:
        assert (agent, sample) not in calls, "the same fork was run twice"
        calls.append((agent, sample))
        return random.Random(f"{seed}:{agent}:{sample}").random() < rates.get(agent, 0.0)

    return calls, fork


def test_rounds_stop_once_one_agent_stands_out() -> None:
    calls, fork = _agents({"coder": 1.0}, seed=1)
    points, blamed = settle(fork, AGENTS, forks=10)  # type: ignore[arg-type]
    assert blamed == "coder"
    assert len(calls) == 8  # two rounds of four agents settle a clean difference
    assert {p.agent: (p.rescued, p.forks) for p in points} == {
        "planner": (0, 2),
        "researcher": (0, 2),
        "coder": (2, 2),
        "verifier": (0, 2),
    }
    # a noisier blamed agent needs more rounds, and gets them
    for seed in range(5):
        calls, fork = _agents({"researcher": 0.7}, seed)
        points, blamed = settle(fork, AGENTS, forks=10)  # type: ignore[arg-type]
        assert blamed == "researcher", points
        assert len(calls) == 4 * max(p.forks for p in points)


def test_no_single_agent_when_two_rescue_alike_or_none_does() -> None:
    calls, fork = _agents({"coder": 0.9, "verifier": 0.9}, seed=2)
    points, blamed = settle(fork, AGENTS, forks=10)  # type: ignore[arg-type]
    assert blamed is None
    assert len(calls) == 40 and all(p.forks == 10 for p in points)
    _, never = _agents({}, seed=3)
    assert settle(never, AGENTS, forks=4) == (  # type: ignore[arg-type]
        tuple(AgentPoint(agent=a, rescued=0, forks=4) for a in AGENTS),
        None,
    )
    with pytest.raises(ValueError, match="forks must be >= 1"):
        settle(never, AGENTS, forks=0)  # type: ignore[arg-type]


def test_blame_seeds_differ_by_agent_and_sample() -> None:
    seeds = {blame_seed(7, 3, a, s) for a in AGENTS for s in range(5)}
    assert len(seeds) == 20 and all(0 <= s < 2**31 for s in seeds)
    assert blame_seed(7, 3, "coder", 1) == blame_seed(7, 3, "coder", 1)


# --- the planted-team scenario -----------------------------------------------------------------


@pytest.fixture
def team(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = data_dir("seeds", "attribution/planted-team.toml")
    monkeypatch.setenv(ENV_SCENARIOS, str(folder))
    yield folder


def _planted_runs(store: EventStore, count: int, seed: int = 21) -> list[tuple[str, int, str]]:
    """Failed sim-planted runs with their planted (step, agent)."""
    spec = get_scenario("planted-team")
    outcomes = execute_all(
        store.url, plan_runs(spec, model_version="sim-planted", runs=count + 2, seed=seed)
    )
    found = []
    for outcome in outcomes:
        if outcome.failure_type == "completion_criterion":
            state = fold_run(store, outcome.run_id)
            instance = spec.instance(state.task_instance_id or "")
            step = planted_step("sim-planted", spec.model("sim-planted"), state.seed, instance.id)
            assert step is not None
            found.append((outcome.run_id, step, spec.steps_for(instance)[step].spec.role or ""))
    return found[:count]


def test_the_scenario_names_an_agent_for_every_step(team: Path) -> None:
    spec = get_scenario("planted-team")
    assert spec.roles == AGENTS
    steps = spec.steps_for(spec.all_instances()[0])
    assert len(steps) == 30 and all(s.spec.role in AGENTS for s in steps)
    # the planted step is the instance's (systematic), not the seed's
    model = spec.model("sim-planted")
    assert planted_step("sim-planted", model, 1, "project-07") == planted_step(
        "sim-planted", model, 2, "project-07"
    )


def test_the_planted_agent_is_blamed(store: EventStore, team: Path) -> None:
    runs = _planted_runs(store, 3)
    assert len(runs) == 3
    for run_id, step, agent in runs:
        events = store.read_run(run_id)
        roles = {
            e.payload["step_index"]: e.payload["role"] for e in events if e.type == "StepStarted"
        }
        assert roles[step] == agent and roles[29] == "verifier"  # each step names its agent
        found = blame(store, run_id, rescuer="sim-strong", forks=8)
        assert found.verdict == "blamed", found.summary
        assert found.step == step and found.attribution.decisive_step == step
        assert found.blamed == agent and found.step_agent == agent
        assert found.failure_agent == "verifier"
        points = {p.agent: p for p in found.agents}
        blamed = points[agent]
        assert blamed.rescued == blamed.forks >= 2
        others = [p for p in found.agents if p.agent != agent and p.acts]
        assert others and all(p.rescued == 0 and p.forks == blamed.forks for p in others)
        # the intervals: Wilson for n/n and 0/n do not overlap once n >= 3, and the reported
        # intervals are exactly those
        report = found.as_dict()
        for shown in report["agents"]:
            point = points[shown["agent"]]
            if point.forks:
                assert shown["ci"] == [point.interval.low, point.interval.high]
        assert report["blamed_agent"] == agent and report["verdict"] == "blamed"
        assert found.forks_spent == found.attribution.located.forks_spent + found.blame_forks
        assert found.forks_spent < found.attribution.exhaustive_cost
    # every fork is in the attribution's session; the per-agent ones record their version map
    refresh(store)
    run_id, step, agent = runs[0]
    forks = list_runs(store, session=f"attribute:{run_id}:sim-strong", limit=1000)
    per_agent = [f for f in forks if store.read_run(f.run_id)[0].payload.get("role_versions")]
    assert per_agent and all(f.model_version == "sim-planted" for f in per_agent)
    # issue 35: asking again forks nothing -- the step search and every agent's forks are
    # read back (same step, seed and version), and the answer is the same
    first = blame(store, run_id, rescuer="sim-strong", forks=8)
    before = store.last_position()
    again = blame(store, run_id, rescuer="sim-strong", forks=8)
    assert store.last_position() == before
    assert again.as_dict()["agents"] == first.as_dict()["agents"] and again.blamed == agent


def test_a_per_agent_fork_replays_exactly(store: EventStore, team: Path) -> None:
    run_id, step, agent = _planted_runs(store, 1)[0]
    fork = replay(
        store,
        run_id,
        fork_at_step=step,
        model_version="sim-planted",
        role_versions={agent: "sim-strong"},
        seed=blame_seed(1, step, agent, 0),
    )
    assert fork.status == "completed", fork.summary  # the planted agent upgraded: rescued
    events = store.read_run(fork.run_id)
    assert events[0].payload["role_versions"] == {agent: "sim-strong"}
    roles = {e.payload["step_index"]: e.payload["role"] for e in events if e.type == "StepStarted"}
    for call in (e for e in events if e.type == "ModelCalled"):
        index = call.payload["step_index"]
        if index >= step:  # live: the upgraded agent on the rescuer, the others on their own
            wanted = "sim-strong" if roles[index] == agent else "sim-planted"
            assert call.payload["model"] == wanted
    again = replay(store, fork.run_id)
    assert again.identical, again.summary
    assert store.read_run(again.run_id)[0].payload["role_versions"] == {agent: "sim-strong"}
    # upgrading another agent leaves the planted mistake in place
    other = next(a for a in AGENTS if a != agent)
    kept = replay(
        store,
        run_id,
        fork_at_step=step,
        model_version="sim-planted",
        role_versions={other: "sim-strong"},
        seed=blame_seed(1, step, other, 0),
    )
    assert kept.status == "failed"


def test_no_single_agent_for_unsystematic_mistakes(store: EventStore, team: Path) -> None:
    # sim-sloppy's silent errors are random: any fresh sample of the agent fixes its mistake,
    # so upgrading one agent rescues about as often as upgrading another
    spec = get_scenario("planted-team")
    state = start_run(
        store, spec, instance_id=spec.all_instances()[3].id, model_version="sim-sloppy", seed=103
    )
    assert state.failure_type == "completion_criterion"
    found = blame(store, state.run_id, rescuer="sim-strong", forks=10)
    assert found.attribution.verdict == "decisive"
    assert found.verdict == "no_single_agent", found.summary
    assert found.blamed is None and "no single agent" in found.summary
    assert all(p.forks == 10 for p in found.agents)
    rescuing = [p for p in found.agents if p.rescued]
    assert len(rescuing) >= 2  # several agents' upgrades rescue


def test_blame_refuses_bad_input(store: EventStore, team: Path) -> None:
    run_id, _, agent = _planted_runs(store, 1)[0]
    with pytest.raises(SteplogError, match="has no agent 'nobody'; its agents: planner"):
        blame(store, run_id, rescuer="sim-strong", agents=["nobody"])
    with pytest.raises(ScenarioError, match="no model version 'sim-9'"):
        blame(store, run_id, rescuer="sim-9")
    with pytest.raises(ScenarioError, match="has no agent 'nobody'"):
        replay(
            store, run_id, fork_at_step=0, model_version="sim-strong", role_versions={"nobody": "x"}
        )
    with pytest.raises(ScenarioError, match="no model version 'sim-9'"):
        replay(store, run_id, fork_at_step=0, role_versions={agent: "sim-9"})
    with pytest.raises(SteplogError, match="use them with --fork-at-step"):
        replay(store, run_id, role_versions={agent: "sim-strong"})
    spec = get_scenario("sandbox")
    outcome = execute_all(store.url, plan_runs(spec, model_version="sim-v1", runs=12, seed=3))
    failed = next(o for o in outcome if o.status == "failed")
    with pytest.raises(SteplogError, match="not a multi-agent scenario"):
        blame(store, failed.run_id, rescuer="uniform-0.0")
    store.append(
        "sdk-1",
        [
            RunStarted(scenario="team", model_version="gpt-x", agent="my-team", source="sdk"),
            RunFailed(step="plan", step_index=0, error_type="model_error", message="boom"),
        ],
        expected_version=0,
    )
    # SDK runs blame through their registered entry point (tests/test_attribution_sdk.py)
    with pytest.raises(SteplogError, match="agent 'my-team', which is not registered"):
        blame(store, "sdk-1", rescuer="sim-strong")
    with pytest.raises(SteplogError, match="needs agent 'my-team', which is not registered"):
        replay(store, "sdk-1", fork_at_step=0, role_versions={"planner": "gpt-y"})
    store.append(
        "otlp-1",
        [
            RunStarted(scenario="team", model_version="gpt-x", agent="my-team", source="otlp"),
            RunFailed(step="plan", step_index=0, error_type="model_error", message="boom"),
        ],
        expected_version=0,
    )
    with pytest.raises(SteplogError, match="not imported ones"):
        blame(store, "otlp-1", rescuer="sim-strong")


def test_old_step_and_run_events_read_with_the_new_fields_null() -> None:
    version, payload = catalogue.upcast("StepStarted", 1, {"step": "a", "step_index": 0})
    assert version == 2 and payload["role"] is None
    version, payload = catalogue.upcast(
        "RunStarted", 1, {"scenario": "s", "model_version": "m", "agent": "a"}
    )
    assert version == catalogue.model("RunStarted").schema_version  # the latest one
    assert payload["role_versions"] is None


def test_attribute_by_agent_cli(store_url: str, team: Path) -> None:
    store = EventStore.open(store_url)
    run_id, step, agent = _planted_runs(store, 1)[0]
    spec = get_scenario("sandbox")
    outcome = execute_all(store.url, plan_runs(spec, model_version="sim-v1", runs=12, seed=3))
    single = next(o for o in outcome if o.status == "failed").run_id
    store.close()
    base = ["attribute", run_id, "--rescuer", "sim-strong", "--forks", "6", "--db", store_url]
    result = runner.invoke(app, [*base, "--by-agent", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)  # one document
    assert report["blamed_agent"] == agent and report["step"] == step
    assert report["attribution"]["decisive_step"] == step
    shown = runner.invoke(app, [*base, "--by-agent", "--agent", agent, "--agent", "coder"])
    assert shown.exit_code == 0, shown.output
    assert f"blamed: {agent}" in shown.output or agent == "coder"
    unknown = runner.invoke(app, [*base, "--by-agent", "--agent", "nobody"])
    assert unknown.exit_code == 1 and "has no agent 'nobody'" in unknown.output
    assert "Traceback" not in unknown.output
    lonely = runner.invoke(app, [*base, "--agent", "coder"])
    assert lonely.exit_code == 1 and "use it with --by-agent" in lonely.output
    flat = runner.invoke(
        app, ["attribute", single, "--rescuer", "uniform-0.0", "--by-agent", "--db", store_url]
    )
    assert flat.exit_code == 1 and "not a multi-agent scenario" in flat.output


def test_bench_attribute_agents_small() -> None:
    from steplog.bench.attribute_agents import run_agent_benchmark

    result = run_agent_benchmark(runs=3, forks=6)
    report = result.as_dict()
    assert result.runs == 3 and result.agents == 4
    assert result.step_correct == 3 and result.agent_correct == 3
    assert result.mean_forks == result.mean_step_forks + result.mean_blame_forks
    assert result.mean_forks < result.exhaustive_forks
    assert report["agent_accuracy"]["method"] == "wilson"


def test_replay_cli_forks_one_agent_by_hand(store_url: str, team: Path) -> None:
    store = EventStore.open(store_url)
    run_id, step, agent = _planted_runs(store, 1)[0]
    store.close()
    fork = ["replay", run_id, "--fork-at-step", str(step), "--model-version", "sim-planted"]
    upgraded = ["--agent-version", f"{agent}=sim-strong", "--seed", "4"]
    result = runner.invoke(app, [*fork, *upgraded, "--db", store_url, "--json"])
    assert result.exit_code == 0, result.output
    forked = json.loads(result.output)
    assert forked["status"] == "completed"
    store = EventStore.open(store_url)
    assert store.read_run(forked["run_id"])[0].payload["role_versions"] == {agent: "sim-strong"}
    store.close()
    again = runner.invoke(app, ["replay", forked["run_id"], "--db", store_url, "--json"])
    assert again.exit_code == 0 and json.loads(again.output)["identical"] is True
    bad = runner.invoke(app, [*fork, "--agent-version", agent, "--db", store_url])
    assert bad.exit_code == 1 and f"takes AGENT=VERSION, not '{agent}'" in bad.output
    no_fork = runner.invoke(
        app, ["replay", run_id, "--agent-version", f"{agent}=sim-strong", "--db", store_url]
    )
    assert no_fork.exit_code == 1 and "use them with --fork-at-step" in no_fork.output
    stranger = runner.invoke(app, [*fork, "--agent-version", "boss=sim-strong", "--db", store_url])
    assert stranger.exit_code == 1 and "has no agent 'boss'" in stranger.output
