"""Attribution and per-agent blame for SDK runs (issue 16, item 3): users' own agents fork
with distinct seeds and per-agent versions, and ``attribute [--by-agent] --import`` finds the
decisive step and the agent that made the planted mistake."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from steplog import EventStore, record_run
from steplog.attribution import attribute
from steplog.attribution.blame import blame
from steplog.attribution.result import fork_seed
from steplog.cli import app
from steplog.cli.replay import import_agent_code
from steplog.errors import SteplogError
from steplog.projections.run_state import fold
from steplog.recorder import registered_agent
from steplog.replay import replay

# A planner/coder/verifier team, offline. The scripted model answers by (agent, version, seed,
# step, a recorded random salt); the "weak" version's coder silently drops a sign at step
# "code-2" (index PLANTED), and the verifier's final check (index FAILURE) fails on it.
AGENT_SOURCE = """
from steplog import model_call, register_agent, rng, step

STEPS = [
    ("plan", "planner"), ("design", "planner"), ("code-1", "coder"), ("review-1", "verifier"),
    ("code-2", "coder"), ("code-3", "coder"), ("review-2", "verifier"), ("integrate", "coder"),
    ("final-check", "verifier"),
]
SEEN = []


@model_call("team-model")
def ask(agent, version, seed, step, salt):
    bug = version == "weak" and agent == "coder" and step == "code-2"  # silent: no error now
    return {"text": f"{agent}/{step} on {version} #{(seed * 31 + salt) % 100003}", "bug": bug}


@register_agent("team-agent")
def team_agent(task, model_version="weak", role_versions=None, seed=0):
    SEEN.append({"model_version": model_version, "role_versions": role_versions, "seed": seed})
    versions = role_versions or {}
    bugs = []
    for name, role in STEPS:
        with step(name, role=role) as s:
            if name == "final-check" and bugs:
                raise ValueError(f"{task}: tests fail after {', '.join(bugs)}")
            salt = rng().randint(0, 10**6)  # a recorded draw: from the fork's seed when live
            answer = ask(role, versions.get(role, model_version), seed, name, salt)
            if answer["bug"]:
                bugs.append(name)
            s.output = answer
    return {"task": task, "steps": len(STEPS)}


@register_agent("roles-only-agent")
def roles_only_agent(task, role_versions=None, seed=0):
    return team_agent(task, "weak", {"planner": "weak", "coder": "weak", "verifier": "weak",
                                     **(role_versions or {})}, seed)


@register_agent("plain-agent")
def plain_agent(task):
    with step("only", role="coder") as s:
        s.output = ask("coder", "weak", 0, "code-2", 0)
        raise ValueError("always fails")


@register_agent("solo-agent")
def solo_agent(task, model_version="weak", role_versions=None, seed=0):
    for name in ("code-1", "code-2"):
        with step(name, role="coder") as s:
            s.output = ask("coder", model_version, seed, name, 0)
            if name == "code-2":
                raise ValueError("solo fails")
"""
PLANTED, FAILURE = 4, 8


@pytest.fixture(scope="module")
def agent_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("team") / "team_agents.py"
    path.write_text(AGENT_SOURCE)
    import_agent_code(str(path))  # registers the agents, as `--import FILE` does
    return path


@pytest.fixture
def team(store_url: str, agent_file: Path) -> Iterator[tuple[EventStore, str]]:
    store = EventStore.open(store_url)
    yield store, record(store, "team-agent")
    store.close()


def record(store: EventStore, agent: str, **extra: Any) -> str:
    """Record one run the way the docs say: the entry point gets the run's version and seed."""
    registered = registered_agent(agent)
    assert registered is not None
    version, entry = registered
    if "seed" in inspect.signature(entry).parameters:
        extra["seed"] = 7
    with (
        pytest.raises(ValueError),  # recorded as the run's failure, then raised
        record_run(
            "team-task", model_version="weak", agent=agent, agent_version=version, store=store,
            seed=7, input={"task": "ledger"},
        ) as run,
    ):  # fmt: skip
        run.output = entry(task="ledger", **extra)
    return run.run_id


def calls(store: EventStore, run_id: str, kind: str = "ModelCalled") -> list[dict[str, Any]]:
    return [e.payload for e in store.read_run(run_id) if e.type == kind]


def seen() -> list[dict[str, Any]]:
    import sys

    module = sys.modules["team_agents"]
    return module.SEEN  # type: ignore[no-any-return]


def test_the_recorded_run_fails_later_than_its_planted_mistake(
    team: tuple[EventStore, str],
) -> None:
    store, run_id = team
    state = fold(store.read_run(run_id))
    assert (state.status, state.failure_step_index, state.seed) == ("failed", FAILURE, 7)
    roles = [e.payload["role"] for e in store.read_run(run_id) if e.type == "StepStarted"]
    assert roles[PLANTED] == "coder" and set(roles) == {"planner", "coder", "verifier"}
    assert [c["response"]["bug"] for c in calls(store, run_id)].index(True) == PLANTED


def test_seeded_forks_are_distinct_futures_that_replay_exactly(
    team: tuple[EventStore, str],
) -> None:
    store, run_id = team
    seeds = [fork_seed(7, 2, sample) for sample in range(3)]
    forks = [
        replay(store, run_id, fork_at_step=2, model_version="strong", seed=s, session_id="t")
        for s in seeds
    ]
    assert [f.status for f in forks] == ["completed"] * 3
    started = [store.read_run(f.run_id)[0].payload for f in forks]
    assert [p["seed"] for p in started] == seeds
    assert {p["session_id"] for p in started} == {"t"}
    assert [entry["seed"] for entry in seen()[-3:]] == seeds  # the entry point got each seed
    original = calls(store, run_id, "RandomDrawn")
    futures = []
    for fork in forks:
        drawn = calls(store, fork.run_id, "RandomDrawn")
        assert drawn[:2] == original[:2]  # the prefix is served
        futures.append(tuple(d["value"] for d in drawn[2:]))
    assert len(set(futures)) == 3  # rng() draws from each fork's seed: three futures
    texts = {tuple(c["response"]["text"] for c in calls(store, f.run_id)[2:]) for f in forks}
    assert len(texts) == 3
    for fork in forks:
        again = replay(store, fork.run_id)
        assert again.identical, (again.summary, again.first_difference)
        assert store.read_run(again.run_id)[0].payload["seed"] == fork_seed(7, 2, forks.index(fork))
    same = replay(store, run_id, fork_at_step=2, model_version="strong", seed=seeds[0])
    assert tuple(d["value"] for d in calls(store, same.run_id, "RandomDrawn")[2:]) == futures[0]
    unseeded = replay(store, run_id, fork_at_step=2, model_version="strong")
    assert store.read_run(unseeded.run_id)[0].payload["seed"] == 7


def test_a_fork_with_one_agent_upgraded_records_its_map_and_replays_exactly(
    team: tuple[EventStore, str],
) -> None:
    store, run_id = team
    coder = replay(store, run_id, fork_at_step=PLANTED, role_versions={"coder": "strong"}, seed=1)
    verifier = replay(store, run_id, fork_at_step=PLANTED, role_versions={"verifier": "strong"})
    assert (coder.status, verifier.status) == ("completed", "failed")
    assert seen()[-1]["role_versions"] == {"verifier": "strong"}
    head = store.read_run(coder.run_id)[0].payload
    assert (head["role_versions"], head["model_version"]) == ({"coder": "strong"}, "weak")
    answered = [c["request"]["args"][:2] for c in calls(store, coder.run_id)[PLANTED:]]
    assert ["coder", "strong"] in answered and ["verifier", "weak"] in answered
    again = replay(store, coder.run_id)
    assert again.identical, (again.summary, again.first_difference)
    assert seen()[-1]["role_versions"] == {"coder": "strong"}  # the recorded map, again
    replayed = store.read_run(again.run_id)[0].payload
    assert replayed["role_versions"] == {"coder": "strong"} and replayed["seed"] == 1


def test_attribute_finds_the_planted_step_and_blames_the_planted_agent(
    team: tuple[EventStore, str],
) -> None:
    store, run_id = team
    found = attribute(store, run_id, rescuer="strong", forks=4)
    assert (found.verdict, found.decisive_step, found.failure_step) == ("decisive", PLANTED, 8)
    assert found.failure_step_name == "final-check"
    assert found.located.forks_spent < found.exhaustive_cost
    curve = {p.step: p for p in found.located.curve}
    assert curve[PLANTED].rescued == curve[PLANTED].forks == 4
    assert all(p.rescued == 0 for p in found.located.curve if p.step > PLANTED)
    forks = [r for r in store.read_all() if r.type == "RunStarted"]
    mine = [e.payload for e in forks if e.payload.get("session_id") == found.session]
    assert len(mine) == found.located.forks_spent
    assert len({(p["fork_step"], p["seed"]) for p in mine}) == len(mine)  # distinct futures
    blamed = blame(store, run_id, rescuer="strong", forks=6)
    assert (blamed.verdict, blamed.blamed, blamed.step) == ("blamed", "coder", PLANTED)
    assert (blamed.step_agent, blamed.failure_agent) == ("coder", "verifier")
    points = {p.agent: p for p in blamed.agents}
    assert not points["planner"].acts and points["planner"].forks == 0  # acts only before
    assert points["verifier"].rescued == 0 and points["coder"].rescued == points["coder"].forks


def test_an_entry_point_with_role_versions_only_is_attributed_through_the_map(
    store_url: str, agent_file: Path
) -> None:
    store = EventStore.open(store_url)
    run_id = record(store, "roles-only-agent")
    found = attribute(store, run_id, rescuer="strong", forks=2)
    assert (found.verdict, found.decisive_step) == ("decisive", PLANTED)
    fork = next(
        e.payload
        for e in store.read_all()
        if e.type == "RunStarted" and e.payload.get("session_id") == found.session
    )
    assert fork["role_versions"] == dict.fromkeys(["planner", "coder", "verifier"], "strong")
    store.close()


def test_runs_that_cannot_be_attributed_are_refused_before_forking(
    store_url: str, agent_file: Path
) -> None:
    store = EventStore.open(store_url)
    plain = record(store, "plain-agent")
    solo = record(store, "solo-agent")
    with pytest.raises(SteplogError, match="takes neither a model_version nor a role_versions"):
        attribute(store, plain, rescuer="strong")
    with pytest.raises(SteplogError, match="takes neither a model_version nor a role_versions"):
        blame(store, plain, rescuer="strong")
    with pytest.raises(SteplogError, match="names 1 agent"):
        blame(store, solo, rescuer="strong")
    with pytest.raises(SteplogError, match="takes no role_versions parameter"):
        replay(store, plain, fork_at_step=0, role_versions={"coder": "strong"})
    team = record(store, "team-agent")
    with pytest.raises(SteplogError, match="has no agent 'tester'; its agents: planner, coder"):
        blame(store, team, rescuer="strong", agents=["tester"])
    with pytest.raises(SteplogError, match="has no agent 'tester'; its agents: planner, coder"):
        replay(store, team, fork_at_step=1, role_versions={"tester": "strong"})
    with pytest.raises(SteplogError, match="use it with --fork-at-step"):
        replay(store, team, seed=3)
    assert len([e for e in store.read_all() if e.type == "RunStarted"]) == 3  # no forks
    store.close()


def test_attribute_cli_on_an_sdk_run_with_import(
    team: tuple[EventStore, str], store_url: str, agent_file: Path
) -> None:
    store, run_id = team
    plain = record(store, "plain-agent")
    runner = CliRunner()
    base = ["attribute", run_id, "--rescuer", "strong", "--forks", "3", "--db", store_url]
    result = runner.invoke(app, [*base, "--import", str(agent_file), "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert (found["verdict"], found["decisive_step"]) == ("decisive", PLANTED)
    shown = runner.invoke(app, [*base, "--import", str(agent_file), "--by-agent"])
    assert shown.exit_code == 0, shown.output
    assert "blamed: coder" in shown.stdout and "<- blamed" in shown.stdout
    session = f"attribute:{run_id}:strong"
    fork = next(
        e.run_id
        for e in store.read_all()
        if e.type == "RunStarted" and e.payload.get("session_id") == session
    )
    again = runner.invoke(
        app, ["replay", fork, "--import", str(agent_file), "--db", store_url, "--json"]
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["identical"] is True
    by_hand = runner.invoke(
        app, ["replay", run_id, "--fork-at-step", "4", "--agent-version", "coder=strong",
              "--seed", "11", "--import", str(agent_file), "--db", store_url, "--json"],
    )  # fmt: skip
    assert by_hand.exit_code == 0, by_hand.output
    made = json.loads(by_hand.stdout)
    assert (made["mode"], made["status"]) == ("fork", "completed")
    head = store.read_run(made["run_id"])[0].payload
    assert (head["seed"], head["role_versions"]) == (11, {"coder": "strong"})
    bad = runner.invoke(
        app, ["attribute", plain, "--rescuer", "strong", "--db", store_url, "--import",
              str(agent_file)],
    )  # fmt: skip
    assert bad.exit_code == 1
    assert bad.stderr.startswith("error: agent 'plain-agent' cannot be forked onto another")
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.output
    missing = runner.invoke(
        app, ["attribute", run_id, "--rescuer", "strong", "--db", store_url, "--import",
              "./no_such_agent.py"],
    )  # fmt: skip
    assert missing.exit_code == 1
    assert "error: --import ./no_such_agent.py: no such file" in missing.stderr


def test_a_batch_of_sdk_runs_is_attributed_and_repeating_it_forks_nothing(
    store_url: str, agent_file: Path
) -> None:
    from steplog.annotations import add_to_regression_set
    from steplog.projections.queries import refresh, run_summary

    store = EventStore.open(store_url)
    runs = [record(store, "team-agent"), record(store, "team-agent")]
    add_to_regression_set(store, "sdk-nightly", runs)
    refresh(store)
    signature = run_summary(store, runs[0]).signature  # type: ignore[union-attr]
    store.close()
    runner = CliRunner()
    common = ["--rescuer", "strong", "--forks", "2", "--db", store_url, "--import", str(agent_file)]
    first = runner.invoke(app, ["attribute", "--set", "sdk-nightly", *common, "--json"])
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    assert {r["run_id"]: r["decisive_step"] for r in report["runs"]} == dict.fromkeys(runs, 4)
    assert [r["forks_reused"] for r in report["runs"]] == [0, 0]
    (group,) = report["histogram"]
    assert group["runs"] == 2
    again = runner.invoke(app, ["attribute", "--signature", signature, *common, "--json"])
    assert again.exit_code == 0, again.output
    repeated = json.loads(again.stdout)["runs"]
    assert all(r["forks_reused"] == r["forks_spent"] for r in repeated)  # read back, not forked
    assert {r["decisive_step"] for r in repeated} == {PLANTED}


def test_a_fork_whose_prefix_code_changed_stops_the_attribution(
    team: tuple[EventStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from steplog import model_call, step
    from steplog.recorder import registry

    @model_call("other-model")
    def other(task: str) -> dict[str, Any]:
        return {"text": task, "bug": False}

    def changed(task: str, model_version: str = "weak", seed: int = 0) -> dict[str, Any]:
        with step("plan", role="planner") as s:
            s.output = other(task)  # another model than the recording's at step 0
        return {}

    store, run_id = team
    monkeypatch.setitem(registry._AGENTS, "team-agent", ("1", changed))
    fork = replay(store, run_id, fork_at_step=PLANTED, model_version="strong")
    assert fork.divergence is not None and fork.divergence["step_index"] == 0
    with pytest.raises(SteplogError, match=r"diverged from its recording .*agent's code changed"):
        attribute(store, run_id, rescuer="strong", forks=2, scan=True)
