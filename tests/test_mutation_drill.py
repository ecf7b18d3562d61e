"""The mutation drill (issue 15): planted changes must be caught by check-only replay at the step
and call where they act, and unchanged code must raise no false alarm.

Scenario mutants are built from one drill scenario (scenario specs are data: a mutant is the
spec's dict with one change); SDK mutants re-register one user agent whose steps are a plan
(also data). Every expectation -- step and call -- is computed from the recording the mutant is
replayed against, never hard-coded.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steplog import EventStore, model_call, record_run, register_agent, step, tool_call
from steplog.harness.runner import launch
from steplog.harness.scenario import ScenarioSpec
from steplog.replay import replay
from steplog.store import StoredEvent

CALLS = ("ModelCalled", "ToolCalled", "ClockRead", "RandomDrawn")

DRILL: dict[str, Any] = {
    "name": "drill",
    "version": "1",
    "gate_policy": "auto-approve",
    "config": {"max_retry_per_step": 2},
    "generate_instances": {"count": 6, "id_prefix": "case-"},
    "steps": [
        {"name": "intake", "tool": "fetch", "fields": ["amount", "tax"]},
        {"name": "parse", "fields": ["total"]},
        {"name": "check", "fields": ["score"]},
        {"name": "post", "tool": "ledger", "fields": ["posted"], "gate": True},
        {
            "name": "report",
            "inputs": ["intake", "check"],
            "fields": ["a", "b"],
            "rule_fields": ["a"],
        },
        {"name": "close", "fields": ["done"]},
    ],
    "completion": {"check": "field_accuracy", "threshold": 0.5},
    "models": {
        "flaky": {
            "tool_error_rate": 0.2,
            "malformed_rate": 0.1,
            "wrong_rate": 0.15,
            "silent_error_rate": 0.15,
        },
        "clean": {},
    },
}


def spec_of(data: dict[str, Any]) -> ScenarioSpec:
    return ScenarioSpec.model_validate(data)


@dataclass(frozen=True)
class Recording:
    run_id: str
    events: list[StoredEvent]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e.payload for e in self.events if e.type == kind]

    def calls(self, step_index: int, kind: str | None = None) -> list[int]:
        """The step's calls (not the run's start clock, which is read before step 0)."""
        started = next(
            i
            for i, e in enumerate(self.events)
            if e.type == "StepStarted" and e.payload["step_index"] == step_index
        )
        return [
            e.payload["call_index"]
            for e in self.events[started:]
            if e.type in CALLS
            and e.payload.get("step_index") == step_index
            and (kind is None or e.type == kind)
        ]

    @property
    def status(self) -> str:
        return self.events[-1].type

    def last_call_before(self, predicate: Callable[[StoredEvent], bool]) -> tuple[int, int]:
        """(step, call) of the last call before the first event matching ``predicate``."""
        last = None
        for event in self.events:
            if predicate(event):
                step_index = event.payload["step_index"]
                assert last is not None and last.payload["step_index"] == step_index
                return step_index, last.payload["call_index"]
            if event.type in CALLS:
                last = event
        raise AssertionError("no such event in the recording")

    def cumulative(self, through_step: int, field: str) -> float:
        """Sum of ``field`` over the calls up to the end of ``through_step``."""
        return sum(
            (e.payload.get(field) or 0)
            for e in self.events
            if e.type in ("ModelCalled", "ToolCalled")
            and (e.payload.get("step_index") or 0) <= through_step
        )

    def tokens(self, through_step: int, only: int | None = None) -> int:
        return sum(
            e.payload["input_tokens"] + e.payload["output_tokens"]
            for e in self.events
            if e.type == "ModelCalled"
            and e.payload["step_index"] <= through_step
            and (only is None or e.payload["step_index"] == only)
        )


@pytest.fixture(scope="module")
def drill_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EventStore]:
    store = EventStore.open(f"sqlite:///{tmp_path_factory.mktemp('drill')}/drill.db")
    yield store
    store.close()


@pytest.fixture(scope="module")
def recordings(drill_store: EventStore) -> dict[str, list[Recording]]:
    """Runs of the drill scenario: clean ones, flaky ones, and auto-rejected ones."""
    spec = spec_of(DRILL)
    found: dict[str, list[Recording]] = {"clean": [], "flaky": [], "rejected": []}
    for group, version, policy, count in (
        ("clean", "clean", None, 3),
        ("flaky", "flaky", None, 24),
        ("rejected", "clean", "auto-reject", 2),
    ):
        for i in range(count):
            instance = spec.all_instances()[i % 6].id
            ending = launch(
                drill_store,
                spec,
                instance_id=instance,
                model_version=version,
                seed=100 + i,
                run_id=f"drill-{group}-{i:02d}",
                gate_policy=policy,  # type: ignore[arg-type]
            )
            found[group].append(Recording(ending.run_id, drill_store.read_run(ending.run_id)))
    return found


# --- scenario mutants --------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    name: str
    mutate: Callable[[dict[str, Any]], None]
    pick: Callable[[dict[str, list[Recording]]], Recording]
    expect: Callable[[Recording], tuple[int | None, int | None]]


def clean(runs: dict[str, list[Recording]]) -> Recording:
    return runs["clean"][0]


def first(
    predicate: Callable[[Recording], bool],
) -> Callable[[dict[str, list[Recording]]], Recording]:
    def pick(runs: dict[str, list[Recording]]) -> Recording:
        chosen = [r for group in ("flaky", "clean") for r in runs[group] if predicate(r)]
        assert chosen, "the drill's recordings lack a run this mutant needs"
        return chosen[0]

    return pick


def at_first_call(k: int, kind: str | None = None) -> Callable[[Recording], tuple[int, int]]:
    return lambda r: (k, r.calls(k, kind)[0])


def at_last_call(k: int) -> Callable[[Recording], tuple[int, int]]:
    return lambda r: (k, r.calls(k)[-1])


def steps(data: dict[str, Any]) -> list[dict[str, Any]]:
    return data["steps"]  # type: ignore[no-any-return]


def insert(k: int, new: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda d: steps(d).insert(k, new)


def remove(k: int) -> Callable[[dict[str, Any]], None]:
    return lambda d: steps(d).pop(k)


def swap(k: int) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        s = steps(d)
        s[k], s[k + 1] = s[k + 1], s[k]

    return change


def set_step(k: int, **fields: Any) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        for key, value in fields.items():
            if value is None:
                steps(d)[k].pop(key, None)
            else:
                steps(d)[k][key] = value

    return change


def set_config(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["config"].update(fields)


def rename(k: int, name: str) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        old = steps(d)[k]["name"]
        steps(d)[k]["name"] = name
        for other in steps(d):  # keep explicit inputs pointing at the renamed step
            if other.get("inputs"):
                other["inputs"] = [name if i == old else i for i in other["inputs"]]

    return change


def first_retry(r: Recording) -> int | None:
    failed = [
        e.payload["step_index"]
        for e in r.events
        if e.type in ("StepAttemptFailed", "ValidationFailed")
    ]
    return failed[0] if failed else None


def retried(r: Recording) -> bool:
    k = first_retry(r)
    return k is not None and any(
        p["step_index"] == k and p["attempt"] == 2 for p in r.of("StepStarted")
    )


def failure_is(r: Recording, kind: str) -> tuple[int, int]:
    return r.last_call_before(
        lambda e: (
            e.type in ("StepAttemptFailed", "ValidationFailed")
            and (e.payload.get("layer") or e.payload.get("error_type")) == kind
        )
    )


def completed_step(k: int) -> Callable[[Recording], tuple[int, int]]:
    """The call of the attempt that completed step k (the first to pass every check)."""
    return lambda r: r.last_call_before(
        lambda e: e.type == "StepCompleted" and e.payload["step_index"] == k
    )


def accuracy_below_one(r: Recording) -> bool:
    if r.status != "RunCompleted":
        return False
    from steplog.harness.simulated import truth

    done = {p["step"]: p["output"] for p in r.of("StepCompleted")}
    instance = r.events[0].payload["task_instance_id"]
    return any(v != truth(instance, name, f) for name, out in done.items() for f, v in out.items())


EXTRA = {"name": "audit", "fields": ["flag"]}
EXTRA_TOOL = {"name": "audit", "tool": "scanner", "fields": ["flag"]}

SCENARIO_MUTANTS: list[Mutant] = [
    # structure: add, remove, reorder steps
    Mutant("add step first", insert(0, EXTRA), clean, at_first_call(0)),
    Mutant("add step at 2", insert(2, EXTRA), clean, at_first_call(2)),
    Mutant("add tool step at 4", insert(4, EXTRA_TOOL), clean, at_first_call(4)),
    Mutant("add step last", insert(6, EXTRA), clean, lambda r: (6, None)),
    Mutant("remove step 1", remove(1), clean, at_first_call(1)),
    Mutant("remove step 4", remove(4), clean, at_first_call(4)),
    Mutant("remove last step", remove(5), clean, lambda r: (5, None)),
    Mutant("swap steps 0 and 1", swap(0), clean, at_first_call(0)),
    Mutant("swap steps 1 and 2", swap(1), clean, at_first_call(1)),
    Mutant("swap steps 4 and 5", swap(4), clean, at_first_call(4)),
    # prompts: the step's name and the fields it asks for are the request
    Mutant("rename step 2", rename(2, "verify"), clean, at_first_call(2)),
    Mutant("rename step 4", rename(4, "summary"), clean, at_first_call(4)),
    Mutant(
        "ask step 1 for more", set_step(1, fields=["total", "currency"]), clean, at_first_call(1)
    ),
    Mutant(
        "ask step 3 for other fields",
        set_step(3, fields=["ok"]),
        clean,
        at_first_call(3, "ModelCalled"),
    ),
    Mutant("ask step 5 for fewer", set_step(5, fields=["x"]), clean, at_first_call(5)),
    # inputs: which earlier outputs a step reads, and the task's own input
    Mutant("step 5 reads the input", set_step(5, inputs=["input"]), clean, at_first_call(5)),
    Mutant("step 4 reads less", set_step(4, inputs=["intake"]), clean, at_first_call(4)),
    Mutant(
        "step 2 reads two steps", set_step(2, inputs=["intake", "parse"]), clean, at_first_call(2)
    ),
    Mutant(
        "task input changed",
        lambda d: d["generate_instances"].update(params={"region": "eu"}),
        clean,
        at_first_call(0, "ModelCalled"),
    ),
    # tools and their arguments
    Mutant("other tool at step 0", set_step(0, tool="fetch_v2"), clean, at_first_call(0)),
    Mutant("tool added at step 1", set_step(1, tool="lookup"), clean, at_first_call(1)),
    Mutant("tool removed at step 3", set_step(3, tool=None), clean, at_first_call(3)),
    Mutant("other tool at step 3", set_step(3, tool="ledger_v2"), clean, at_first_call(3)),
    # validation
    Mutant(
        "range check at step 2",
        set_step(2, custom_check="in_range", max_value=0.5),
        clean,
        completed_step(2),
    ),
    Mutant(
        "range check at step 4",
        set_step(4, custom_check="in_range", min_value=5000),
        clean,
        completed_step(4),
    ),
    Mutant(
        "range check on a retried step",
        lambda d: steps(d)[0].update(custom_check="in_range", max_value=0.5),
        first(
            lambda r: (
                any(p["step_index"] == 0 and p["attempt"] > 1 for p in r.of("StepStarted"))
                and any(p["step_index"] == 0 for p in r.of("StepCompleted"))
            )
        ),
        completed_step(0),
    ),
    Mutant(
        "business rule dropped",
        lambda d: [s.update(rule_fields=[]) for s in steps(d)],
        first(lambda r: any(p["layer"] == "business_rule" for p in r.of("ValidationFailed"))),
        lambda r: failure_is(r, "business_rule"),
    ),
    # limits
    Mutant("max_steps 3", set_config(max_steps=3), clean, lambda r: (3, None)),
    Mutant("max_steps 1", set_config(max_steps=1), clean, lambda r: (1, None)),
    Mutant(
        "no retries per step",
        set_config(max_retry_per_step=0),
        first(retried),
        lambda r: r.last_call_before(lambda e: e.type in ("StepAttemptFailed", "ValidationFailed")),
    ),
    Mutant(
        "no retries per run",
        set_config(allowed_total_retries=0),
        first(retried),
        lambda r: r.last_call_before(lambda e: e.type in ("StepAttemptFailed", "ValidationFailed")),
    ),
    Mutant("run token budget", lambda d: None, clean, lambda r: (2, r.calls(2)[-1])),
    Mutant("step token budget", lambda d: None, clean, lambda r: (0, r.calls(0)[-1])),
    Mutant("timeout", lambda d: None, clean, lambda r: (2, r.calls(2)[-1])),
    # gates
    Mutant("gate removed", set_step(3, gate=None), clean, lambda r: (3, None)),
    Mutant("gate added at step 1", set_step(1, gate=True), clean, lambda r: (1, None)),
    Mutant(
        "gate moved to step 4",
        lambda d: (steps(d)[3].pop("gate"), steps(d)[4].update(gate=True)),
        clean,
        lambda r: (3, None),
    ),
    Mutant(
        "gate added before a rejected one",
        set_step(1, gate=True),
        lambda runs: runs["rejected"][0],
        lambda r: (1, None),
    ),
    Mutant(
        "rejected gate removed",
        set_step(3, gate=None),
        lambda runs: runs["rejected"][0],
        lambda r: (3, None),
    ),
    # the run's completion criterion
    Mutant(
        "stricter completion",
        lambda d: d["completion"].update(threshold=1.0),
        first(accuracy_below_one),
        at_last_call(5),
    ),
]


def limit_for(mutant: Mutant, run: Recording, data: dict[str, Any]) -> None:
    """Limits whose value depends on the recording: just below what the run used."""
    if mutant.name == "run token budget":
        data["config"]["run_token_budget"] = run.tokens(2) - 1
    elif mutant.name == "step token budget":
        data["config"]["step_token_budget"] = run.tokens(0, only=0) - 1
    elif mutant.name == "timeout":
        data["config"]["timeout_seconds"] = run.cumulative(2, "latency_ms") / 1000 - 0.05


def replayed_at(store: EventStore, run: Recording, spec: ScenarioSpec) -> Any:
    result = replay(store, run.run_id, check=True, scenario=spec)
    assert not result.written
    return result


@pytest.mark.parametrize("mutant", SCENARIO_MUTANTS, ids=lambda m: m.name)
def test_scenario_mutant_is_reported_where_it_acts(
    drill_store: EventStore, recordings: dict[str, list[Recording]], mutant: Mutant
) -> None:
    run = mutant.pick(recordings)
    data = copy.deepcopy(DRILL)
    mutant.mutate(data)
    limit_for(mutant, run, data)
    result = replayed_at(drill_store, run, spec_of(data))
    found = result.departure
    assert found is not None, f"{mutant.name}: not detected ({result.summary})"
    assert (found.step_index, found.call_index) == mutant.expect(run), result.summary
    assert result.behaviour_changed


def test_unchanged_scenario_gives_no_false_alarm(
    drill_store: EventStore, recordings: dict[str, list[Recording]]
) -> None:
    spec = spec_of(DRILL)
    runs = [r for group in recordings.values() for r in group]
    assert {r.status for r in runs} >= {"RunCompleted", "RunFailed", "RunAborted"}
    for run in runs:
        result = replayed_at(drill_store, run, spec)
        assert result.identical and not result.behaviour_changed, (run.run_id, result.summary)


def test_the_drill_plants_fifty_changes() -> None:
    assert len(SCENARIO_MUTANTS) + len(SDK_MUTANTS) >= 50
    assert len({m.name for m in SCENARIO_MUTANTS}) == len(SCENARIO_MUTANTS)


# --- SDK agent mutants -------------------------------------------------------------------------

PLAN: list[dict[str, Any]] = [
    {"name": "classify", "prompt": "classify: {ticket}"},
    {"name": "lookup", "tool": "crm", "args": {"customer": "{customer}"}, "prompt": "summarise"},
    {"name": "draft", "prompt": "draft a reply to {ticket}", "threshold": 6, "retries": 3},
    {"name": "send", "tool": "mailer", "args": {"to": "{customer}"}},
]


def score(text: str) -> int:
    return hashlib.sha256(text.encode()).digest()[0] % 10


@model_call("drill-model")
def ask(prompt: str) -> dict[str, Any]:
    return {"text": f"answer to {prompt}", "score": score(prompt)}


@tool_call("crm")
def crm(customer: str) -> dict[str, Any]:
    return {"customer": customer, "tier": "gold"}


@tool_call("mailer")
def mailer(to: str) -> dict[str, Any]:
    return {"sent_to": to}


@tool_call("approver")
def approver(to: str) -> dict[str, Any]:
    return {"approved": True}


TOOLS = {"crm": crm, "mailer": mailer, "approver": approver}


def run_plan(plan: list[dict[str, Any]], ticket: str, customer: str) -> dict[str, Any]:
    """The agent: each step of the plan, in order (the plan is the code under test)."""
    outputs: dict[str, Any] = {}
    for spec in plan:
        with step(spec["name"]) as s:
            values = {"ticket": spec.get("input", ticket), "customer": customer}
            if spec.get("tool"):
                args = {k: v.format(**values) for k, v in spec["args"].items()}
                outputs[spec["name"] + ":tool"] = TOOLS[spec["tool"]](**args)
            if spec.get("prompt"):
                for attempt in range(spec.get("retries", 0) + 1):
                    answer = ask(spec["prompt"].format(**values) + f" #{attempt}")
                    if answer["score"] < spec.get("threshold", 10):
                        break
                    if attempt == spec.get("retries", 0):
                        raise RuntimeError(f"no acceptable answer at {spec['name']}")
                    s.attempt_failed(f"score {answer['score']}")
                outputs[spec["name"]] = answer["text"]
            s.output = {"done": spec["name"]}
    return outputs


def register_plan(plan: list[dict[str, Any]]) -> None:
    @register_agent("drill-agent", version="1")
    def agent(ticket: str, customer: str) -> dict[str, Any]:
        return run_plan(plan, ticket, customer)


@pytest.fixture(scope="module")
def sdk_recordings(drill_store: EventStore) -> list[Recording]:
    register_plan(PLAN)
    found = []
    for i in range(12):
        inputs = {"ticket": f"ticket {i}", "customer": f"c-{i}"}
        try:
            with record_run(
                "drill-sdk",
                model_version="m1",
                agent="drill-agent",
                input=inputs,
                store=drill_store,
                seed=i,
            ) as run:
                run.output = run_plan(PLAN, **inputs)
        except RuntimeError:
            pass
        found.append(Recording(run.run_id, drill_store.read_run(run.run_id)))
    return found


def draft_retried(r: Recording) -> bool:
    return any(p["step_index"] == 2 and p["attempt"] == 2 for p in r.of("StepStarted"))


def sdk_completed(r: Recording) -> bool:
    return r.status == "RunCompleted" and not draft_retried(r)


def changed(k: int, **fields: Any) -> Callable[[list[dict[str, Any]]], None]:
    def change(plan: list[dict[str, Any]]) -> None:
        for key, value in fields.items():
            if value is None:
                plan[k].pop(key, None)
            else:
                plan[k][key] = value

    return change


@dataclass(frozen=True)
class SdkMutant:
    name: str
    mutate: Callable[[list[dict[str, Any]]], None]
    pick: Callable[[Recording], bool]
    expect: Callable[[Recording], tuple[int | None, int | None]]


NEW_STEP = {"name": "triage", "prompt": "triage {ticket}"}


SDK_MUTANTS: list[SdkMutant] = [
    SdkMutant("add step first", lambda p: p.insert(0, NEW_STEP), sdk_completed, at_first_call(0)),
    SdkMutant("add step at 2", lambda p: p.insert(2, NEW_STEP), sdk_completed, at_first_call(2)),
    SdkMutant("add step last", lambda p: p.append(NEW_STEP), sdk_completed, lambda r: (4, None)),
    SdkMutant("remove first step", lambda p: p.pop(0), sdk_completed, at_first_call(0)),
    SdkMutant("remove last step", lambda p: p.pop(), sdk_completed, at_first_call(3)),
    SdkMutant(
        "swap steps 0 and 1", lambda p: p.insert(0, p.pop(1)), sdk_completed, at_first_call(0)
    ),
    SdkMutant(
        "changed prompt", changed(0, prompt="categorise: {ticket}"), sdk_completed, at_first_call(0)
    ),
    SdkMutant("changed input", changed(0, input="(redacted)"), sdk_completed, at_first_call(0)),
    SdkMutant(
        "changed tool argument",
        changed(1, args={"customer": "id:{customer}"}),
        sdk_completed,
        at_first_call(1, "ToolCalled"),
    ),
    SdkMutant("other tool", changed(3, tool="approver"), sdk_completed, at_first_call(3)),
    SdkMutant("stricter validation", changed(2, threshold=0), sdk_completed, at_first_call(2)),
    SdkMutant("looser validation", changed(2, threshold=10), draft_retried, at_first_call(2)),
    SdkMutant("fewer retries", changed(2, retries=0), draft_retried, at_first_call(2)),
    SdkMutant(
        "approval gate before sending",
        lambda p: p.insert(
            3, {"name": "approve", "tool": "approver", "args": {"to": "{customer}"}}
        ),
        sdk_completed,
        at_first_call(3),
    ),
]


@pytest.mark.parametrize("mutant", SDK_MUTANTS, ids=lambda m: m.name)
def test_sdk_mutant_is_reported_where_it_acts(
    drill_store: EventStore, sdk_recordings: list[Recording], mutant: SdkMutant
) -> None:
    chosen = [r for r in sdk_recordings if mutant.pick(r)]
    assert chosen, "the drill's SDK recordings lack a run this mutant needs"
    run = chosen[0]
    plan = copy.deepcopy(PLAN)
    mutant.mutate(plan)
    register_plan(plan)
    try:
        result = replay(drill_store, run.run_id, check=True)
    finally:
        register_plan(PLAN)
    found = result.departure
    assert found is not None, f"{mutant.name}: not detected ({result.summary})"
    assert (found.step_index, found.call_index) == mutant.expect(run), result.summary


def test_unchanged_agent_gives_no_false_alarm(
    drill_store: EventStore, sdk_recordings: list[Recording]
) -> None:
    register_plan(PLAN)
    assert any(draft_retried(r) for r in sdk_recordings)
    for run in sdk_recordings:
        result = replay(drill_store, run.run_id, check=True)
        assert result.identical and not result.behaviour_changed, (run.run_id, result.summary)


# --- the demo ----------------------------------------------------------------------------------


def test_every_demo_run_checks_clean(tmp_path: Path) -> None:
    """Zero false alarms over every run `steplog demo --no-ui` seeds (a few per cell here;
    `steplog bench replay --check` does 1,000)."""
    from typer.testing import CliRunner

    from steplog.cli import app

    db = tmp_path / "demo.db"
    seeded = CliRunner().invoke(app, ["demo", "--no-ui", "--runs", "3", "--db", str(db)])
    assert seeded.exit_code == 0, seeded.output
    store = EventStore.open(str(db))
    try:
        from steplog.projections.run_state import fold

        run_ids = sorted({e.run_id for e in store.read_all()})
        assert len(run_ids) >= 24
        for run_id in run_ids:
            if not fold(store.read_run(run_id)).is_terminal:
                continue
            result = replay(store, run_id, check=True)
            assert result.identical and not result.behaviour_changed, (run_id, result.summary)
    finally:
        store.close()
