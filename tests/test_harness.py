"""The harness: simulated failure modes, layered validation, budgets, gates, determinism."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers.scenarios import canonical_digest, write_scenario
from scipy.stats import binomtest

from steplog.events import StepStarted, catalogue
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.runner import RunStateError, approve, fold_run, resume, start_run
from steplog.harness.scenario import ModelVersionSpec, ScenarioError, get_scenario, load_scenario
from steplog.harness.simulated import SimulatedModel
from steplog.projections.run_state import NotARunError, fold
from steplog.store import EventStore, NewEvent


@pytest.fixture
def scenarios(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    return folder


def run_drill(store: EventStore, seed: int = 1, version: str = "sim-v1", **kw: Any) -> Any:
    return start_run(
        store, get_scenario("drill"), instance_id="case-1", model_version=version, seed=seed, **kw
    )


def types(store: EventStore, run_id: str) -> list[str]:
    return [e.type for e in store.read_run(run_id)]


# --- the article's sandbox ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance", "version", "p_step", "steps"),
    [
        ("chain-3", "sim-v1", 0.9, 3),
        ("chain-5", "sim-v1", 0.9, 5),
        ("chain-8", "sim-v1", 0.9, 8),
        ("chain-12", "sim-v1", 0.9, 12),
        ("chain-5", "uniform-0.0", 1.0, 5),
        ("chain-5", "uniform-0.2", 0.8, 5),
        ("chain-5", "uniform-0.3", 0.7, 5),
    ],
)
def test_sandbox_completion_agrees_with_p_to_the_n(
    tmp_path: Path, instance: str, version: str, p_step: float, steps: int
) -> None:
    """Article 001 §3.4: with per-step error e and no retries, P(complete) = (1 - e)^N."""
    store = EventStore.open(str(tmp_path / "sandbox.db"))
    sandbox = get_scenario("sandbox")
    plans = plan_runs(sandbox, model_version=version, runs=400, seed=0, instance_id=instance)
    outcomes = execute_all(store.url, plans)
    completed = sum(o.status == "completed" for o in outcomes)
    expected = p_step**steps
    if expected == 1.0:
        assert completed == len(outcomes)
        return
    interval = binomtest(completed, len(outcomes)).proportion_ci(0.95, method="wilson")
    assert interval.low <= expected <= interval.high, (completed, interval, expected)
    failures = Counter(o.failure_type for o in outcomes if o.status != "completed")
    assert set(failures) <= {"model_error"}


def test_same_seed_gives_the_same_event_stream(store: EventStore) -> None:
    invoice = get_scenario("invoice-extraction")
    first = start_run(store, invoice, instance_id="batch-01", model_version="sim-v1", seed=5)
    again = start_run(store, invoice, instance_id="batch-01", model_version="sim-v1", seed=5)
    other = start_run(store, invoice, instance_id="batch-01", model_version="sim-v1", seed=6)
    first_d, again_d, other_d = (
        canonical_digest(store.read_run(r.run_id)) for r in (first, again, other)
    )
    assert first_d == again_d
    assert first_d != other_d


def test_steps_read_the_outputs_they_declare(store: EventStore) -> None:
    invoice = get_scenario("invoice-extraction")
    state = start_run(store, invoice, instance_id="batch-02", model_version="sim-v2", seed=8)
    requests = {
        e.payload["request"]["step"]: e.payload["request"]
        for e in store.read_run(state.run_id)
        if e.type == "ModelCalled"
    }
    assert list(requests["list_files"]["inputs"]) == ["input"]
    assert list(requests["extract_07"]["inputs"]) == ["list_files"]
    table_inputs = requests["build_table"]["inputs"]
    assert list(table_inputs) == [f"extract_{n:02d}" for n in range(1, 21)]
    assert table_inputs["extract_03"] == state.values["extract_03"]


def test_inputs_must_name_earlier_steps(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, extra_step='inputs = ["later"]')
    with pytest.raises(ScenarioError, match=r"step 'finish' reads \['later'\]"):
        load_scenario(path)
    path = write_scenario(tmp_path, extra_step='inputs = ["nothing_*"]')
    with pytest.raises(ScenarioError, match=r"step 'finish' reads \['nothing_\*'\]"):
        load_scenario(path)


def test_every_recorded_event_validates(store: EventStore) -> None:
    for name in ("sandbox", "invoice-extraction", "customer-service", "data-migration"):
        spec = get_scenario(name)
        for version in spec.versions_for_demo():
            execute_all(store.url, plan_runs(spec, model_version=version, runs=6, seed=3))
    events = list(store.read_all())
    assert len(events) > 500
    for event in events:
        assert event.to_event(catalogue).type_name() == event.type
    assert {
        "ModelCalled",
        "ToolCalled",
        "ClockRead",
        "ValidationFailed",
        "StepCompleted",
        "ApprovalRequested",
        "ApprovalDecided",
    } <= {e.type for e in events}


def test_two_demo_versions_differ_measurably(tmp_path: Path) -> None:
    store = EventStore.open(str(tmp_path / "v.db"))
    invoice = get_scenario("invoice-extraction")
    rates = {}
    for version in ("sim-v1", "sim-v2"):
        outcomes = execute_all(
            store.url, plan_runs(invoice, model_version=version, runs=60, seed=100)
        )
        rates[version] = sum(o.status == "completed" for o in outcomes) / len(outcomes)
    assert rates["sim-v2"] > rates["sim-v1"] + 0.1, rates


# --- failure modes and validation layers -------------------------------------------------


def test_uniform_error_fails_the_step_after_its_retries(scenarios: Path, store: EventStore) -> None:
    write_scenario(scenarios, base_error=1.0)
    state = run_drill(store)
    assert (state.status, state.failure_type, state.failure_step) == (
        "failed",
        "model_error",
        "s_01",
    )
    assert state.steps[0].attempts == 3  # max_retry_per_step = 2
    assert types(store, state.run_id).count("StepAttemptFailed") == 3
    assert types(store, state.run_id)[-2:] == ["StepFailed", "RunFailed"]


def test_malformed_output_is_caught_by_the_schema_layer(scenarios: Path, store: EventStore) -> None:
    write_scenario(scenarios, malformed_rate=1.0)
    state = run_drill(store)
    failures = [e.payload for e in store.read_run(state.run_id) if e.type == "ValidationFailed"]
    assert {f["layer"] for f in failures} == {"schema"}
    assert state.failure_type == "schema"


def test_plausible_but_wrong_output_is_caught_by_the_business_rule(
    scenarios: Path, store: EventStore
) -> None:
    write_scenario(scenarios, wrong_rate=1.0)
    state = run_drill(store)
    failures = [e.payload for e in store.read_run(state.run_id) if e.type == "ValidationFailed"]
    assert {(f["layer"], f["check"]) for f in failures} == {("business_rule", "matches_source")}
    assert "disagree(s) with the source" in failures[0]["message"]


def test_silent_errors_pass_every_step_and_fail_the_completion_criterion(
    scenarios: Path, store: EventStore
) -> None:
    completion = 'completion = { check = "field_accuracy", threshold = 0.95 }'
    write_scenario(
        scenarios, silent_error_rate=1.0, extra_step="rule_fields = []", completion=completion
    )
    state = run_drill(store)
    assert all(step.status == "done" for step in state.steps)
    assert (state.status, state.failure_type) == ("failed", "completion_criterion")
    assert "field accuracy" in (state.failure_message or "")


def test_custom_check_is_the_third_layer(scenarios: Path, store: EventStore) -> None:
    write_scenario(scenarios, extra_step='custom_check = "in_range"\nmax_value = 0.5')
    state = run_drill(store, version="sim-v2")
    failures = [e.payload for e in store.read_run(state.run_id) if e.type == "ValidationFailed"]
    assert failures and {f["layer"] for f in failures} == {"custom"}
    assert state.failure_step == "finish"


def test_loops_repeat_one_action_until_the_retry_budget_ends(
    scenarios: Path, store: EventStore
) -> None:
    write_scenario(scenarios, loop_rate=1.0)
    state = run_drill(store)
    assert state.failure_type == "loop"
    responses = [
        e.payload["response"] for e in store.read_run(state.run_id) if e.type == "ModelCalled"
    ]
    assert len(responses) == 3 and responses[0] == responses[1] == responses[2]


def test_transient_tool_errors_are_retried(scenarios: Path, store: EventStore) -> None:
    write_scenario(scenarios, tool_error_rate=0.5)
    kinds: Counter[str] = Counter()
    for seed in range(15):
        state = run_drill(store, seed=seed)
        for event in store.read_run(state.run_id):
            if event.type == "StepAttemptFailed":
                kinds[event.payload["error_type"]] += 1
                assert event.payload["retryable"] is True
    assert set(kinds) == {"tool_timeout", "tool_rate_limit"}


def test_context_drift_makes_later_steps_fail_more() -> None:
    model = SimulatedModel("d", ModelVersionSpec(drift_per_step=0.02))

    def error_rate(step_index: int) -> float:
        errors = sum(
            model.complete(
                seed=s,
                instance_id="i",
                step="x",
                step_index=step_index,
                attempt=1,
                fields=["a"],
                rule_fields=["a"],
            ).response["status"]
            == "error"
            for s in range(2000)
        )
        return errors / 2000

    assert error_rate(0) == 0
    assert 0.15 < error_rate(10) < 0.25  # 0.02 x 10
    assert error_rate(25) > 0.4


def test_token_accounting_grows_with_context() -> None:
    model = SimulatedModel("d", ModelVersionSpec(input_tokens=100, context_growth_tokens=50))
    replies = [
        model.complete(
            seed=1, instance_id="i", step="x", step_index=i, attempt=1, fields=["a"], rule_fields=[]
        )
        for i in (0, 4)
    ]
    tokens = [reply.input_tokens for reply in replies]
    assert tokens == [100, 300]


# --- limits ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "model", "budget"),
    [
        ("max_steps = 3", {}, "max_steps"),
        ("allowed_total_retries = 1", {"base_error": 0.6}, "allowed_total_retries"),
        ("step_token_budget = 700", {"base_error": 1.0}, "step_token_budget"),
        ("run_token_budget = 1500", {}, "run_token_budget"),
        ("timeout_seconds = 0.5", {}, "timeout_seconds"),
    ],
)
def test_each_limit_ends_the_run_with_a_recorded_reason(
    scenarios: Path, store: EventStore, config: str, model: dict[str, float], budget: str
) -> None:
    write_scenario(scenarios, config=config, **model)
    state = run_drill(store, seed=2)
    assert state.status == "aborted"
    exceeded = [e.payload for e in store.read_run(state.run_id) if e.type == "BudgetExceeded"]
    assert [e["budget"] for e in exceeded] == [budget]
    assert exceeded[0]["used"] > exceeded[0]["limit"] or budget in (
        "max_steps",
        "allowed_total_retries",
    )
    assert types(store, state.run_id)[-1] == "RunAborted"


# --- gates -------------------------------------------------------------------------------


def test_auto_approve_and_auto_reject(scenarios: Path, store: EventStore) -> None:
    write_scenario(scenarios, gate=True)
    approved = run_drill(store, version="sim-v2", gate_policy="auto-approve")
    assert approved.status == "completed"
    decided = [e.payload for e in store.read_run(approved.run_id) if e.type == "ApprovalDecided"]
    assert decided == [
        {
            "step": "finish",
            "step_index": 4,
            "approved": True,
            "decided_by": "policy",
            "reason": None,
        }
    ]
    rejected = run_drill(store, version="sim-v2", gate_policy="auto-reject")
    assert (rejected.status, rejected.failure_step) == ("aborted", "finish")


def test_manual_gate_waits_then_continues_from_its_events(
    scenarios: Path, store: EventStore
) -> None:
    write_scenario(scenarios, gate=True)
    waiting = run_drill(store, version="sim-v2", gate_policy="manual")
    assert (waiting.status, waiting.run_mode) == ("awaiting_approval", "manual_review_required")
    assert waiting.current_step is not None and waiting.current_step.name == "finish"
    with pytest.raises(RunStateError, match="waiting for approval of step 'finish'"):
        resume(store, waiting.run_id)
    with pytest.raises(RunStateError, match="waits for approval of step 'finish', not 's_01'"):
        approve(store, waiting.run_id, step="s_01")
    done = approve(store, waiting.run_id, step="finish", reason="looks right")
    assert done.status == "completed"
    with pytest.raises(RunStateError, match="not waiting for an approval"):
        approve(store, waiting.run_id, step="finish")

    other = run_drill(store, version="sim-v2", gate_policy="manual", seed=9)
    rejected = approve(store, other.run_id, step="finish", approved=False, reason="wrong table")
    assert rejected.status == "aborted"
    assert "rejected" in (rejected.failure_message or "")


# --- resume ------------------------------------------------------------------------------


def test_resume_refuses_finished_and_unknown_runs(scenarios: Path, store: EventStore) -> None:
    write_scenario(scenarios)
    finished = run_drill(store, version="sim-v2")
    with pytest.raises(RunStateError, match="already completed"):
        resume(store, finished.run_id)
    with pytest.raises(RunStateError, match="no run 'ghost'"):
        resume(store, "ghost")


def test_resume_refuses_a_changed_agent_version(scenarios: Path, store: EventStore) -> None:
    path = write_scenario(scenarios, gate=True)
    waiting = run_drill(store, version="sim-v2", gate_policy="manual")
    path.write_text(path.read_text().replace('version = "1"', 'version = "2"'))
    with pytest.raises(RunStateError, match="recorded with scenario/drill version 1"):
        approve(store, waiting.run_id, step="finish")


def test_resume_after_losing_a_step_in_flight_matches_an_uninterrupted_run(
    scenarios: Path, store: EventStore
) -> None:
    """Drop everything after step 2 (as a crash would), resume, compare with a clean run."""
    write_scenario(scenarios, base_error=0.2, tool_error_rate=0.2)
    clean = run_drill(store, seed=11, run_id="clean")
    full = store.read_run("clean")
    cut = (
        next(
            i
            for i, e in enumerate(full)
            if e.type == "StepCompleted" and e.payload["step_index"] == 1
        )
        + 1
    )
    store.append("crashed", [NewEvent(e.to_event()) for e in full[:cut]], expected_version=0)
    resumed = resume(store, "crashed")
    assert resumed.status == clean.status
    assert canonical_digest(store.read_run("crashed")) == canonical_digest(full)


def _crash_points(events: list[Any]) -> list[int]:
    """Prefix lengths a crash can leave: ends of committed batches (a new batch starts next)."""
    starts_batch = {"StepStarted", "ApprovalRequested"}
    return [
        i + 1
        for i, event in enumerate(events[:-1])
        if event.type in ("StepCompleted", "StepAttemptFailed", "ValidationFailed", "ClockRead")
        and events[i + 1].type in starts_batch
    ]


@pytest.mark.parametrize(
    "model", [{"loop_rate": 0.5, "wrong_rate": 0.3}, {"base_error": 0.3, "tool_error_rate": 0.3}]
)
def test_resume_from_every_crash_point_matches_the_uninterrupted_run(
    scenarios: Path, store: EventStore, model: dict[str, float]
) -> None:
    write_scenario(
        scenarios, steps=5, config="allowed_total_retries = 6\nrun_token_budget = 5000", **model
    )
    for seed in range(6):
        clean_id = f"clean-{seed}"
        run_drill(store, seed=seed, run_id=clean_id)
        full = store.read_run(clean_id)
        for cut in _crash_points(full):
            crashed = f"crashed-{seed}-{cut}"
            prefix = [NewEvent(e.to_event(), recorded_at=e.recorded_at) for e in full[:cut]]
            store.append(crashed, prefix, expected_version=0)
            resume(store, crashed)
            assert canonical_digest(store.read_run(crashed)) == canonical_digest(full), (seed, cut)


def test_a_timeout_in_the_last_step_is_still_a_timeout(scenarios: Path, store: EventStore) -> None:
    # Four steps of tool + model (250 ms each), then `finish` (100 ms): 1.1 s in all.
    write_scenario(scenarios, config="timeout_seconds = 1.05")
    state = run_drill(store, version="sim-v2")
    assert (state.status, state.failure_type, state.failure_step) == (
        "aborted",
        "timeout_seconds",
        "finish",
    )


def test_sdk_runs_are_not_continued_by_the_harness(store: EventStore) -> None:
    from steplog import record_run

    with (
        pytest.raises(KeyboardInterrupt),
        record_run("sandbox", model_version="sim-v1", store=store) as run,
    ):
        raise KeyboardInterrupt
    store.append(run.run_id, [StepStarted(step="late", step_index=0)])
    with pytest.raises(RunStateError, match="recorded by 'sdk' for agent 'sandbox'"):
        resume(store, run.run_id)


def test_approve_refuses_before_recording_when_the_scenario_is_gone(
    scenarios: Path, store: EventStore
) -> None:
    path = write_scenario(scenarios, gate=True)
    waiting = run_drill(store, version="sim-v2", gate_policy="manual")
    path.unlink()
    with pytest.raises(RunStateError, match="no registered scenario 'drill'"):
        approve(store, waiting.run_id, step="finish")
    assert fold_run(store, waiting.run_id).status == "awaiting_approval"


def test_a_run_that_does_not_start_with_run_started(store: EventStore) -> None:
    store.append("orphan", [StepStarted(step="a", step_index=0)])
    with pytest.raises(NotARunError, match="does not start with RunStarted"):
        fold_run(store, "orphan")


def test_process_metrics_and_time_travel_in_the_run_state(
    scenarios: Path, store: EventStore
) -> None:
    write_scenario(scenarios, wrong_rate=0.45)
    for seed in range(40):
        state = run_drill(store, seed=seed)
        first = state.steps[0]
        assert state.first_step_correct == (first.status == "done" and first.attempts == 1)
        later = state.steps[1:]
        assert state.mid_run_errors == sum(s.failed_attempts > 0 for s in later)
        assert state.mid_run_recovered == sum(
            s.failed_attempts > 0 and s.status == "done" for s in later
        )
        if state.mid_run_recovered and state.first_step_correct is False:
            break
    else:
        pytest.fail("no run with a wrong first step and a recovered mid-run error in 40 seeds")
    events = store.read_run(state.run_id)
    as_of = fold(events[:3])  # time travel: the state after three events
    assert (as_of.status, as_of.current_step and as_of.current_step.name) == ("running", "s_01")
    assert as_of.as_dict()["steps"][0]["status"] == "running"
    assert fold(events).as_dict()["first_step_correct"] is False


# --- scenario files ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name = [", "not valid TOML"),
        ('name = "x"\nbogus = 1', "bogus: Extra inputs are not permitted"),
        ('name = "Bad Name"', "name: String should match pattern"),
        ('name = "x"\n[[steps]]\nname = "s{n}"\nrepeat = -3', r"steps\.0\.repeat"),
        ('name = "x"\n[[steps]]\nname = "s{n}"\nrepeat = true', r"steps\.0\.repeat"),
        ('name = "x"\n[[steps]]\nname = "s{n}"\nrepeat = 3000000', "less than or equal to 1000"),
    ],
)
def test_bad_scenario_files_name_the_file_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=message) as info:
        load_scenario(path)
    assert str(path) in str(info.value)


def test_scenario_consistency_errors(scenarios: Path) -> None:
    path = write_scenario(scenarios)
    good = path.read_text()
    path.write_text(good.replace('version = "1"', 'version = "1"\ndemo_versions = ["v9"]'))
    with pytest.raises(ScenarioError, match=r"demo_versions \['v9'\] are not in \[models\]"):
        load_scenario(path)
    with pytest.raises(ScenarioError, match=r"drill\.toml"):
        get_scenario("drill")  # a broken registered file is reported, not skipped
    path.write_text(good.replace("repeat = 4", 'repeat = "pages"'))
    with pytest.raises(ScenarioError, match="has no integer param of that name"):
        load_scenario(path)
    path.write_text(good)
    with pytest.raises(ScenarioError, match="does not exist"):
        load_scenario(scenarios / "missing.toml")
    with pytest.raises(ScenarioError, match=r"no registered scenario 'nope'; registered: .*drill"):
        get_scenario("nope")


def test_unknown_instance_and_model_version_are_clear_errors(store: EventStore) -> None:
    sandbox = get_scenario("sandbox")
    with pytest.raises(ScenarioError, match="no task instance 'chain-99'"):
        start_run(store, sandbox, instance_id="chain-99", model_version="sim-v1")
    with pytest.raises(ScenarioError, match="no model version 'gpt-9'; it has: sim-v1"):
        start_run(store, sandbox, instance_id="chain-3", model_version="gpt-9")
    assert store.last_position() == 0


def test_fold_run_of_unknown_run(store: EventStore) -> None:
    with pytest.raises(RunStateError, match="no run 'x'"):
        fold_run(store, "x")


def test_expanded_steps_and_instances_belong_to_one_spec_object() -> None:
    """Steps and instances are expanded once per spec; a copy with other steps or instances
    (another object) never sees its original's, and callers get lists of their own."""
    spec = get_scenario("invoice-extraction")
    instance = spec.all_instances()[0]
    steps = spec.steps_for(instance)
    assert spec.steps_for(instance) == steps and spec.steps_for(instance) is not steps
    steps.clear()  # a caller's list: the spec's own stays whole
    assert spec.steps_for(instance)
    fewer = spec.model_copy(update={"steps": spec.steps[:1]})
    assert [s.name for s in fewer.steps_for(instance)] == [spec.steps[0].name]
    assert len(spec.steps_for(instance)) > 1
    renamed = spec.model_copy(update={"instances": [instance.model_copy(update={"id": "z-9"})]})
    assert renamed.instance("z-9").id == "z-9"
    with pytest.raises(ScenarioError, match="no task instance 'z-9'"):
        spec.instance("z-9")
    assert spec.instance(instance.id) is instance


def test_new_event_of_is_the_plain_constructor() -> None:
    event = StepStarted(step="a", step_index=0)
    made = NewEvent.of(event, NewEvent(event).event_id)
    assert made == NewEvent(event, made.event_id) and made.recorded_at is None
    with pytest.raises(AttributeError):
        made.event = event  # type: ignore[misc]  # still frozen


def test_the_schema_layer_names_each_problem_whatever_path_decides() -> None:
    """check_schema's quick look (a dict of plain ints and floats) and its full one agree:
    missing fields, bools, strings and non-objects are problems; int and float subclasses
    are numbers."""
    from steplog.harness.scenario import StepSpec
    from steplog.harness.simulated import check_schema

    class Ratio(float):
        pass

    class Count(int):
        pass

    class Output(dict):  # type: ignore[type-arg]
        pass

    step = StepSpec(name="s", fields=["a", "b"])
    for output, problem in (
        ({"a": 1, "b": 2.5}, None),
        ({"a": 1, "b": 2.5, "extra": "x"}, None),
        ({"a": Count(1), "b": Ratio(2.5)}, None),
        (Output(a=1, b=2.0), None),
        ({"a": 1}, "missing field(s) b"),
        ({"a": True, "b": 1}, "field(s) a must be numbers, got [True]"),
        ({"a": "1", "b": None}, "field(s) a, b must be numbers, got ['1', None]"),
        (Output(a="x", b=1), "field(s) a must be numbers, got ['x']"),
        ([1, 2], "output is list, not an object"),
        (None, "output is NoneType, not an object"),
    ):
        assert check_schema(output, step) == problem, output
