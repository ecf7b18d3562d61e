"""Chaos profiles: injected tool faults as recorded facts, the harness's reactions, the planted
fragile step found with intervals, exact replays of faulted forks, sets, refusals and the CLI."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steplog.annotations import add_to_regression_set
from steplog.chaos import (
    FAULTS,
    ChaosProfile,
    FaultPlan,
    Pairs,
    StepProfile,
    chaos,
    chaos_seed,
    chaos_set,
    fault_calls,
    parse_faults,
    session_of,
)
from steplog.cli import app
from steplog.errors import SteplogError
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.runner import RunStateError, fold_run, start_run
from steplog.harness.scenario import ENV_SCENARIOS, get_scenario
from steplog.harness.simulated import ToolReply
from steplog.harness.tool_response import read_tool_result
from steplog.projections.queries import count_failures, list_runs, metrics, refresh
from steplog.replay import replay
from steplog.resources import data_dir
from steplog.stats.multiplicity import benjamini_hochberg
from steplog.stats.paired import PairedTable, tango, tango_test
from steplog.stats.proportions import proportion
from steplog.store import EventStore

runner = CliRunner()


# --- the fault model and the agent's reading of tool answers ---------------------------------


def test_fault_names_parse_and_unknown_ones_are_refused() -> None:
    assert parse_faults(None) == FAULTS
    assert parse_faults("empty, timeout,empty") == ("empty", "timeout")
    with pytest.raises(SteplogError, match="unknown fault 'slow'; known faults: timeout"):
        parse_faults("empty,slow")
    with pytest.raises(SteplogError, match="no fault named"):
        parse_faults(" , ")
    with pytest.raises(SteplogError, match="unknown fault"):
        FaultPlan(0, "flood")


def test_outages_last_a_seeded_number_of_calls() -> None:
    seeds = range(2000)
    for fault in ("empty", "truncated"):
        assert {fault_calls(fault, s) for s in seeds} == {1}
    assert [fault_calls("rate_limit", s) for s in range(50)] == [
        fault_calls("rate_limit", s) for s in range(50)
    ]
    # geometric: P(calls >= 3) = persistence ** 2 (0.4**2 = 16% for rate limits, 9% timeouts)
    long = Counter(fault_calls("rate_limit", s) >= 3 for s in seeds)[True] / len(seeds)
    assert 0.12 < long < 0.20
    long = Counter(fault_calls("timeout", s) >= 3 for s in seeds)[True] / len(seeds)
    assert 0.06 < long < 0.12


def test_faulted_answers_and_how_the_agent_reads_them() -> None:
    spec = get_scenario("customer-service").model("sim-v1")
    step = get_scenario("customer-service").steps[1]
    real = ToolReply({"records": 12, "tool": "crm_lookup"}, None, 400.0)
    assert read_tool_result(real.result, step).action == "use"

    def faulted(fault: str) -> ToolReply:
        return FaultPlan(1, fault).inject("crm_lookup", real, spec)

    timeout = faulted("timeout")
    assert timeout.error_type == "tool_timeout" and timeout.latency_ms == spec.tool_timeout_ms
    assert faulted("rate_limit").error_type == "tool_rate_limit"
    for fault in FAULTS:
        assert faulted(fault).result["injected"] == fault
    empty = faulted("empty")
    assert empty.error_type is None and empty.result["records"] == 0
    assert read_tool_result(empty.result, step).action == "empty"
    proceeding = step.model_copy(update={"on_empty": "proceed"})
    assert read_tool_result(empty.result, proceeding).action == "ungrounded"
    truncated = read_tool_result(faulted("truncated").result, step)
    assert truncated.action == "invalid" and "cut off" in (truncated.problem or "")
    drifted = read_tool_result(faulted("schema_drift").result, step)
    assert drifted.action == "invalid" and "no 'records' field" in (drifted.problem or "")
    # a drifted answer still carries the data, under another name
    assert faulted("schema_drift").result["data"]["record_count"] == 12
    assert read_tool_result(["x"], step).action == "invalid"
    assert read_tool_result({"records": -1}, step).action == "invalid"


def test_a_plan_hits_only_its_step_and_its_first_calls() -> None:
    plan = FaultPlan(3, "rate_limit", calls=2)
    assert plan.applies(3, 1) and plan.applies(3, 2)
    assert not plan.applies(3, 3) and not plan.applies(2, 1)


def test_fragility_is_a_paired_test_adjusted_over_every_cell() -> None:
    pairs = Pairs()
    for faulted, unfaulted in [(False, True)] * 7 + [(True, True)] * 3:
        pairs.add(faulted, unfaulted)
    gap = pairs.difference()
    assert gap == tango(PairedTable(3, 0, 7, 0))
    assert gap is not None and gap.estimate == pytest.approx(-0.7) and gap.high < 0
    # Tango's score test at 0 is McNemar's z = (b - c) / sqrt(b + c) = -sqrt(7)
    assert pairs.p_value() == pytest.approx(tango_test(PairedTable(3, 0, 7, 0)).p_value)
    assert pairs.p_value() == pytest.approx(0.00815097, abs=1e-7)  # chi2.sf(7, 1)
    assert Pairs().difference() is None and Pairs().p_value() == 1.0

    def profile(cells: list[Pairs]) -> ChaosProfile:
        steps = tuple(
            StepProfile(
                scenario="s",
                step=f"step{i}",
                step_index=i,
                tool="tool",
                baseline_completed=10,
                baseline_forks=10,
                faults={"empty": c},
            )
            for i, c in enumerate(cells)
        )
        return ChaosProfile(
            target="r",
            kind="run",
            runs=("r",),
            faults=("empty",),
            forks_per_step=10,
            steps=steps,
            forks_spent=20,
            sessions=("chaos:r",),
        )

    alone = profile([pairs])
    assert [(s.step, f) for s, f in alone.fragile] == [("step0", "empty")]
    # five more cells where nothing happened: 0.0082 * 6 / 1 = 0.049 still passes BH ...
    quiet = [Pairs(both=10) for _ in range(5)]
    assert profile([pairs, *quiet]).is_fragile("step0", "empty")
    # ... seven more do not (0.0082 * 8 = 0.065): many cells need more forks per cell
    crowded = profile([pairs, *[Pairs(both=10) for _ in range(7)]])
    assert crowded.fragile == [] and "no fragile step" in crowded.summary
    expected = benjamini_hochberg([pairs.p_value()] + [1.0] * 7)
    assert crowded.as_dict()["steps"][0]["faults"]["empty"]["p_adjusted"] == expected[0]
    # completion that rose is never fragile, however significant
    better = Pairs(both=3, faulted_only=7)
    assert profile([better]).fragile == []


def test_fork_seeds_are_pure_and_distinct() -> None:
    assert chaos_seed(5, 2, 0) == chaos_seed(5, 2, 0)
    assert len({chaos_seed(5, step, i) for step in range(5) for i in range(20)}) == 100
    assert session_of("r1") == "chaos:r1"


# --- forks of real runs ------------------------------------------------------------------------


@pytest.fixture
def kyc(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = data_dir("seeds", "attribution/kyc-screening.toml")
    monkeypatch.setenv(ENV_SCENARIOS, str(folder))
    yield folder


def _kyc_run(store: EventStore, seed: int = 1, instance: str = "applicant-01") -> str:
    state = start_run(
        store,
        get_scenario("kyc-screening"),
        instance_id=instance,
        model_version="sim-steady",
        seed=seed,
        run_id=f"kyc-{seed}-{instance}",
    )
    assert state.status == "completed"
    return state.run_id


def test_chaos_finds_the_planted_fragile_step_with_intervals(store: EventStore, kyc: Path) -> None:
    run_id = _kyc_run(store)
    profile = chaos(store, run_id, faults=("empty", "truncated"), forks=16)
    steps = {s.step: s for s in profile.steps}
    # the tool steps of the run, in order; score and decide call no tool
    assert list(steps) == ["fetch_applicant", "screen_sanctions", "fetch_documents"]
    assert [s.tool for s in profile.steps] == ["crm_lookup", "sanctions_api", "documents_api"]
    # ground truth (seeds/attribution/kyc-screening.toml): screen_sanctions reads an empty
    # answer as "no hits" and goes on; the others retry it, and every step retries a cut-off one
    assert [(s.step, fault) for s, fault in profile.fragile] == [("screen_sanctions", "empty")]
    sanctions = steps["screen_sanctions"].faults["empty"]
    shown = profile.as_dict()["steps"][1]
    assert shown["unfaulted"]["forks"] == 16 and shown["unfaulted"]["completed"] == 16
    faulted = shown["faults"]["empty"]
    wilson = proportion(sanctions.faulted, 16)
    assert faulted["ci"] == [wilson.low, wilson.high] and faulted["method"] == "wilson"
    unfaulted = proportion(16, 16)
    assert faulted["ci"][1] < unfaulted.low  # the Wilson intervals do not even overlap
    assert faulted["difference"]["method"] == "Tango score"
    assert faulted["difference"]["ci"][1] < 0 and faulted["fragile"]
    assert faulted["p_value"] <= faulted["p_adjusted"] < 0.05
    for name in ("fetch_applicant", "fetch_documents"):
        for fault in ("empty", "truncated"):
            cell = steps[name].faults[fault]
            assert not profile.is_fragile(name, fault) and cell.faulted >= 14, (name, fault, cell)
    assert profile.forks_spent == 3 * 16 * 3
    assert "fragile: screen_sanctions (empty" in profile.summary
    # the same call again gives the same numbers: every fork's seed is a pure function
    again = chaos(store, run_id, faults=("empty", "truncated"), forks=16)
    assert again.as_dict()["steps"] == profile.as_dict()["steps"]


def test_faults_are_recorded_facts_and_faulted_forks_replay_exactly(
    store: EventStore, kyc: Path
) -> None:
    run_id = _kyc_run(store, seed=2)
    profile = chaos(store, run_id, faults=FAULTS, forks=2)
    assert profile.forks_spent == 3 * 2 * (1 + len(FAULTS))
    refresh(store)
    forks = list_runs(store, session=session_of(run_id), limit=1000)
    assert len(forks) == profile.forks_spent
    assert {f.forked_from for f in forks} == {run_id}
    seen: set[str] = set()
    for fork in forks:
        events = store.read_run(fork.run_id)
        injected = [
            e.payload
            for e in events
            if e.type == "ToolCalled" and "injected" in (e.payload.get("result") or {})
        ]
        if not injected:
            continue  # an unfaulted twin
        first = injected[0]
        fault = first["result"]["injected"]
        assert first["step_index"] == fork.fork_step
        if fault in ("timeout", "rate_limit"):
            assert first["status"] == "error" and first["error_type"].startswith("tool_")
        seen.add(fault)
        again = replay(store, fork.run_id)
        assert again.identical, (fault, again.summary)
        assert fold_run(store, again.run_id).session_id == session_of(run_id)
    assert seen == set(FAULTS)
    # the forks stay out of metrics and failure counts, like every fork
    totals = [m.runs for m in metrics(store, scenario="kyc-screening")]
    assert sum(totals) == 1
    assert count_failures(store, scenario="kyc-screening") == 0


def test_the_harness_reacts_to_each_fault_plausibly(store: EventStore, kyc: Path) -> None:
    run_id = _kyc_run(store, seed=3)

    def fork(fault: str, calls: int, step: int = 0) -> list[str]:
        result = replay(
            store,
            run_id,
            fork_at_step=step,
            seed=chaos_seed(3, step, 0),
            faults=FaultPlan(step, fault, calls),
        )
        events = store.read_run(result.run_id)
        return [
            f"{e.type}:{e.payload.get('error_type') or e.payload.get('check') or ''}"
            for e in events
            if e.payload.get("step_index") == step
            and e.type in ("StepAttemptFailed", "ValidationFailed", "StepCompleted", "StepFailed")
        ]

    assert fork("rate_limit", 1)[:2] == ["StepAttemptFailed:tool_rate_limit", "StepCompleted:"]
    assert fork("timeout", 1)[0] == "StepAttemptFailed:tool_timeout"
    assert fork("empty", 1)[0] == "StepAttemptFailed:tool_empty"
    assert fork("truncated", 1)[0] == "ValidationFailed:tool_response"
    assert fork("schema_drift", 1)[0] == "ValidationFailed:tool_response"
    # an outage longer than the retry budget (max_retry_per_step = 2: three attempts) fails it
    assert fork("rate_limit", 3)[-1] == "StepFailed:tool_rate_limit"
    assert fork("schema_drift", 3)[-1] == "StepFailed:schema"
    # the step that proceeds on an empty answer passes it on unchecked, into the model request
    result = replay(
        store, run_id, fork_at_step=1, seed=chaos_seed(3, 1, 0), faults=FaultPlan(1, "empty")
    )
    asked = [
        e.payload["request"]
        for e in store.read_run(result.run_id)
        if e.type == "ModelCalled" and e.payload["step_index"] == 1
    ]
    assert asked[0]["tool_data"] == "none"
    with pytest.raises(SteplogError, match="only forks take one"):
        replay(store, run_id, faults=FaultPlan(0, "empty"))


def test_a_set_is_profiled_per_step_across_its_runs(store: EventStore, kyc: Path) -> None:
    spec = get_scenario("kyc-screening")
    outcomes = execute_all(store.url, plan_runs(spec, model_version="sim-shaky", runs=16, seed=1))
    failed = [o.run_id for o in outcomes if o.status != "completed"][:2]
    assert len(failed) == 2
    tool_free = next(
        state.run_id
        for seed in range(1, 30)
        for state in [
            start_run(
                store,
                get_scenario("sandbox"),
                instance_id="chain-5",
                model_version="sim-v1",
                seed=seed,
            )
        ]
        if state.status == "failed"
    )
    add_to_regression_set(store, "kyc", [*failed, tool_free])
    profile = chaos_set(store, "kyc", faults=("empty",), forks=3)
    assert profile.kind == "set" and list(profile.runs) == failed
    assert list(profile.skipped) == [tool_free]
    # pooled per step name: each run adds 3 pairs at every step where it called a tool
    called: Counter[str] = Counter()
    for run_id in failed:
        names = fold_run(store, run_id).planned_steps
        steps = {e.payload["step_index"] for e in store.read_run(run_id) if e.type == "ToolCalled"}
        called.update(names[i] for i in steps)
    assert {s.step: s.baseline_forks for s in profile.steps} == {
        k: 3 * v for k, v in called.items()
    }
    for step in profile.steps:
        assert step.faults["empty"].n == step.baseline_forks
    assert profile.sessions == tuple(session_of(r) for r in failed)
    add_to_regression_set(store, "tool-free", [tool_free])
    with pytest.raises(SteplogError, match="no run of regression set 'tool-free' made a tool"):
        chaos_set(store, "tool-free", faults=("empty",), forks=1)
    with pytest.raises(SteplogError, match="no regression set 'nope'"):
        chaos_set(store, "nope", faults=("empty",), forks=1)


def test_refusals_before_any_fork(store: EventStore, kyc: Path) -> None:
    with pytest.raises(RunStateError, match="no run 'ghost'"):
        chaos(store, "ghost", faults=FAULTS)
    sandbox = start_run(
        store, get_scenario("sandbox"), instance_id="chain-3", model_version="uniform-0.0", seed=1
    ).run_id
    with pytest.raises(SteplogError, match="made no tool call: there is nothing to inject"):
        chaos(store, sandbox, faults=FAULTS)
    parked = start_run(
        store,
        get_scenario("data-migration"),
        instance_id=get_scenario("data-migration").all_instances()[0].id,
        model_version="sim-v1",
        seed=1,
        gate_policy="manual",
    )
    assert parked.status == "awaiting_approval"
    with pytest.raises(RunStateError, match="is still awaiting_approval; chaos forks finished"):
        chaos(store, parked.run_id, faults=FAULTS)
    run_id = _kyc_run(store, seed=6)
    with pytest.raises(SteplogError, match="--forks must be at least 1"):
        chaos(store, run_id, faults=FAULTS, forks=0)
    refresh(store)
    assert list_runs(store, session=session_of(run_id)) == []  # nothing was forked


# --- the command line ----------------------------------------------------------------------


def test_cli_table_json_and_errors(store_url: str, kyc: Path) -> None:
    store = EventStore.open(store_url)
    run_id = _kyc_run(store)
    sandbox = start_run(
        store, get_scenario("sandbox"), instance_id="chain-3", model_version="uniform-0.0", seed=1
    ).run_id
    migration = get_scenario("data-migration")
    parked = start_run(
        store,
        migration,
        instance_id=migration.all_instances()[0].id,
        model_version="sim-v1",
        seed=1,
        gate_policy="manual",
    ).run_id
    store.close()
    args = ["chaos", run_id, "--db", store_url, "--forks", "12", "--faults", "empty"]
    shown = runner.invoke(app, args)
    assert shown.exit_code == 0, shown.output
    assert "screen_sanctions" in shown.output and "FRAGILE" in shown.output
    assert f"steplog runs --session chaos:{run_id}" in shown.output
    as_json = runner.invoke(app, [*args[:-4], "--forks", "2", "--faults", "truncated", "--json"])
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)  # exactly one JSON document
    assert document["faults"] == ["truncated"] and document["forks_spent"] == 3 * 2 * 2
    assert {s["step"] for s in document["steps"]} == {
        "fetch_applicant",
        "screen_sanctions",
        "fetch_documents",
    }
    for bad, message in [
        (["chaos", run_id, "--faults", "empty,flood"], "error: --faults: unknown fault 'flood'"),
        (["chaos", sandbox], "made no tool call"),
        (["chaos", "ghost"], "error: no run 'ghost'"),
        (["chaos", parked], "is still awaiting_approval; chaos forks finished runs"),
        (["chaos", "--set", "nope"], "error: no regression set 'nope'"),
        (["chaos"], "error: give a run id or --set NAME"),
        (["chaos", run_id, "--set", "x"], "error: give a run id or --set NAME"),
    ]:
        result = runner.invoke(app, [*bad, "--db", store_url])
        assert result.exit_code == 1, (bad, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], result.output
    zero = runner.invoke(app, ["chaos", run_id, "--forks", "0", "--db", store_url])
    assert zero.exit_code == 2


def test_the_progress_bar_goes_to_stderr(
    store_url: str, kyc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from rich.console import Console

    import steplog.cli.chaos as chaos_cli

    store = EventStore.open(store_url)
    run_id = _kyc_run(store, seed=7)
    store.close()
    stderr = io.StringIO()
    monkeypatch.setattr(chaos_cli, "err_console", Console(file=stderr, force_terminal=True))
    result = runner.invoke(
        app, ["chaos", run_id, "--db", store_url, "--forks", "1", "--faults", "empty", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["forks_spent"] == 3 * 1 * 2
    assert "chaos forks" in stderr.getvalue()  # drawn on the (terminal) stderr, not stdout


def test_a_second_chaos_call_forks_nothing(store: EventStore, kyc: Path) -> None:
    # issue 35: chaos re-forked on every call (960 forks after four calls; text then --json
    # doubled the cost). Recorded forks with the same step, seed and fault are read back.
    run_id = _kyc_run(store, seed=3)
    first = chaos(store, run_id, faults=("empty", "timeout"), forks=3)
    assert first.forks_reused == 0 and first.forks_spent == 3 * 3 * 3
    before = store.last_position()
    again = chaos(store, run_id, faults=("empty", "timeout"), forks=3)
    assert store.last_position() == before  # nothing forked, nothing written
    assert again.forks_reused == again.forks_spent == first.forks_spent
    assert again.as_dict()["steps"] == first.as_dict()["steps"]
    assert "read back from the log" in again.summary
    # more samples or another fault fork only what is new
    more = chaos(store, run_id, faults=("empty", "timeout", "truncated"), forks=4)
    assert more.forks_reused == first.forks_spent
    assert more.forks_spent - more.forks_reused == 3 * 4 * 4 - first.forks_spent
