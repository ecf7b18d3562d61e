"""Check-only replays (`steplog replay RUN --check`, `steplog regress SET --check`): compared in
memory with the recording, nothing written; exit 1 with step, call, expected and got when the
current code behaves differently (issue 15, items 5 and 6)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from steplog import EventStore
from steplog.annotations import add_to_regression_set
from steplog.errors import ConcurrencyError, SteplogError
from steplog.events import ModelCalled, RunCompleted, RunStarted, StepCompleted, unvalidated
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.runner import RunStateError
from steplog.harness.scenario import ENV_SCENARIOS, get_scenario
from steplog.projections.run_state import fold
from steplog.replay import (
    BufferedStore,
    check_run,
    check_runs,
    check_set,
    departure,
    header,
    replay,
    same_stream,
)
from steplog.store import StoredEvent

runner = CliRunner()

SCENARIO = """
name = "gatekeeper"
version = "1"
[config]
max_retry_per_step = 1
[[instances]]
id = "g-1"
[[instances]]
id = "g-2"
[[steps]]
name = "fetch"
tool = "source"
fields = ["value"]
[[steps]]
name = "judge"
fields = ["verdict"]
[[steps]]
name = "write"
fields = ["rows"]
[models.v1]
wrong_rate = 0.3
[models.v2]
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A store with eight runs of a user's scenario (registered from a folder), two of them
    failed and promoted to the regression set 'gate'."""
    folder = tmp_path / "scenarios"
    folder.mkdir()
    (folder / "gatekeeper.toml").write_text(SCENARIO)
    monkeypatch.setenv(ENV_SCENARIOS, str(folder))
    db = f"sqlite:///{tmp_path}/check.db"
    store = EventStore.open(db)
    plans = plan_runs(get_scenario("gatekeeper"), model_version="v1", runs=8, seed=3)
    outcomes = execute_all(store.url, plans)
    failed = [o.run_id for o in outcomes if o.status == "failed"][:2]
    completed = [o.run_id for o in outcomes if o.status == "completed"]
    assert failed and completed
    add_to_regression_set(store, "gate", failed)
    yield {"db": db, "store": store, "folder": folder, "failed": failed, "completed": completed}
    store.close()


def edit_scenario(home: dict[str, Any], old: str, new: str) -> None:
    path = home["folder"] / "gatekeeper.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def count_runs(store: EventStore) -> int:
    return len({e.run_id for e in store.read_all()})


def test_check_writes_nothing_and_exits_0_when_unchanged(home: dict[str, Any]) -> None:
    store, run_id = home["store"], home["completed"][0]
    before = (count_runs(store), store.last_position())
    shown = runner.invoke(app(), ["replay", run_id, "--check", "--db", home["db"]])
    assert shown.exit_code == 0, shown.output
    assert "check-only replay" in shown.stdout and "identical" in shown.stdout
    as_json = runner.invoke(app(), ["replay", run_id, "--check", "--json", "--db", home["db"]])
    document = json.loads(as_json.stdout)
    assert as_json.exit_code == 0
    assert document["written"] is False and document["behaviour_changed"] is False
    assert document["departure"] is None and document["identical"] is True
    assert (count_runs(store), store.last_position()) == before


def test_check_exits_1_naming_step_call_expected_and_got(home: dict[str, Any]) -> None:
    edit_scenario(home, 'name = "judge"\nfields = ["verdict"]', 'name = "judge"\nfields = ["ok"]')
    run_id = home["completed"][0]
    events = home["store"].read_run(run_id)
    model_call = next(
        e.payload["call_index"]
        for e in events
        if e.type == "ModelCalled" and e.payload["step_index"] == 1
    )
    shown = runner.invoke(app(), ["replay", run_id, "--check", "--db", home["db"]])
    assert shown.exit_code == 1
    assert f"diverged at step 1 (judge), call {model_call}" in shown.stdout
    assert "ModelCalled(v1, step 1" in shown.stdout
    document = json.loads(
        runner.invoke(app(), ["replay", run_id, "--check", "--json", "--db", home["db"]]).stdout
    )
    found = document["departure"]
    assert (found["kind"], found["step_index"], found["call_index"]) == (
        "divergence",
        1,
        model_call,
    )
    assert found["expected"].startswith("ModelCalled(v1, step 1") and found["got"]


def test_check_uses_the_scenario_registered_now_and_notes_a_new_version(
    home: dict[str, Any],
) -> None:
    edit_scenario(home, 'version = "1"', 'version = "2"')
    run_id = home["completed"][0]
    with pytest.raises(RunStateError, match="has no registered version '1' \\(registered: 2\\)"):
        replay(home["store"], run_id)  # a writing replay needs the recorded version
    result = replay(home["store"], run_id, check=True)
    assert not result.behaviour_changed, result.summary
    assert result.declared == ["agent_version"]
    assert result.summary == "same behaviour; the run header differs: agent_version"
    assert result.notes and "checked against version 2" in result.notes[0]


def test_a_changed_limit_is_reported_where_it_acts(home: dict[str, Any]) -> None:
    edit_scenario(home, "max_retry_per_step = 1", "max_retry_per_step = 1\nmax_steps = 2")
    run_id = home["completed"][0]
    result = replay(home["store"], run_id, check=True)
    assert result.departure is not None
    assert (result.departure.step_index, result.departure.call_index) == (2, None)
    assert "BudgetExceeded" in (result.departure.got or "")
    assert "config" in result.declared


def test_check_refuses_what_it_cannot_replay(home: dict[str, Any], tmp_path: Path) -> None:
    shown = runner.invoke(app(), ["replay", "no-such-run", "--check", "--db", home["db"]])
    assert shown.exit_code == 1 and "no run 'no-such-run'" in shown.output
    shown = runner.invoke(
        app(), ["replay", home["completed"][0], "--check", "--fork-at-step", "1",
                "--model-version", "v2", "--db", home["db"]],
    )  # fmt: skip
    assert shown.exit_code == 1 and "not a fork" in shown.output
    store = home["store"]
    store.append(
        "half-done",
        [
            RunStarted(
                scenario="gatekeeper", model_version="v1", agent="scenario/gatekeeper",
                agent_version="1", task_instance_id="g-1", seed=1,
            )
        ],
    )  # fmt: skip
    shown = runner.invoke(app(), ["replay", "half-done", "--check", "--db", home["db"]])
    assert shown.exit_code == 1 and "still running; replay a finished run" in shown.output
    store.append(
        "imported",
        [
            RunStarted(scenario="x", model_version="m", agent="a", source="otlp"),
            RunCompleted(output={}),
        ],
    )
    shown = runner.invoke(app(), ["replay", "imported", "--check", "--db", home["db"]])
    assert shown.exit_code == 1 and "with --agent NAME" in shown.output
    assert "Traceback" not in shown.output


def test_regress_check_passes_then_lists_each_changed_sample(home: dict[str, Any]) -> None:
    shown = runner.invoke(app(), ["regress", "gate", "--check", "--db", home["db"]])
    assert shown.exit_code == 0, shown.output
    total = len(home["failed"])
    assert f"{total}/{total} samples of 'gate' behave as recorded" in shown.stdout
    edit_scenario(home, 'name = "fetch"\ntool = "source"', 'name = "fetch"\ntool = "source2"')
    shown = runner.invoke(app(), ["regress", "gate", "--check", "--db", home["db"]])
    assert shown.exit_code == 1
    for run_id in home["failed"]:
        assert f"{run_id}: diverged at step 0 (fetch), call 1" in shown.stdout
    assert f"regression set 'gate': {total}/{total} samples behave differently" in shown.stdout
    assert "could not be checked" not in shown.stdout
    document = json.loads(
        runner.invoke(app(), ["regress", "gate", "--check", "--json", "--db", home["db"]]).stdout
    )
    assert document["passed"] is False and document["failed"] == total
    assert {r["run_id"] for r in document["results"]} == set(home["failed"])
    assert all(r["departure"]["step_index"] == 0 for r in document["results"])


def test_regress_check_errors(home: dict[str, Any]) -> None:
    shown = runner.invoke(app(), ["regress", "nope", "--check", "--db", home["db"]])
    assert shown.exit_code == 1 and "no regression set 'nope'" in shown.output
    assert "sets: gate" in shown.output
    shown = runner.invoke(app(), ["regress", "gate", "--db", home["db"]])
    assert shown.exit_code == 1 and "--model-version" in shown.output
    assert "Traceback" not in shown.output


def test_a_sample_that_cannot_be_replayed_fails_the_gate(home: dict[str, Any]) -> None:
    (home["folder"] / "gatekeeper.toml").unlink()
    progress: list[tuple[int, int]] = []
    result = check_set(home["store"], "gate", progress=lambda d, t: progress.append((d, t)))
    assert not result.passed and len(result.failed) == len(home["failed"])
    assert all("no registered scenario 'gatekeeper'" in (s.error or "") for s in result.samples)
    assert progress[-1] == (len(home["failed"]), len(home["failed"]))


def test_the_writing_replay_stores_its_run_in_one_append(home: dict[str, Any]) -> None:
    store, run_id = home["store"], home["completed"][0]
    appends: list[int] = []
    original = store.append_batch

    def counting(*args: Any, **kwargs: Any) -> Any:
        appends.append(1)
        return original(*args, **kwargs)

    store.append_batch = counting  # type: ignore[method-assign]
    result = replay(store, run_id)
    assert result.identical and result.written
    assert len(appends) == 1  # one transaction for the whole new run
    replayed = fold(store.read_run(result.run_id))
    assert replayed.replay_of == run_id and replayed.status == "completed"


def test_buffered_store_keeps_runs_in_memory(home: dict[str, Any]) -> None:
    store = home["store"]
    buffered = BufferedStore(store)
    started = RunStarted(scenario="s", model_version="m", agent="a")
    buffered.append("mem-1", [started], expected_version=0)
    with pytest.raises(ConcurrencyError):
        buffered.append("mem-1", [RunCompleted(output={})], expected_version=0)
    assert buffered.version("mem-1") == 1 and store.version("mem-1") == 0
    assert buffered.read_run("mem-1")[0].payload["scenario"] == "s"
    assert buffered.read_run(home["completed"][0]) == store.read_run(home["completed"][0])
    with pytest.raises(SteplogError, match="cannot quarantine"):
        buffered.quarantine(source="x", location="y", reason="z", raw="")
    buffered.discard("mem-1")
    assert buffered.read_run("mem-1") == []
    buffered.append("mem-2", [started], expected_version=0)
    buffered.commit("mem-2")
    assert [e.type for e in store.read_run("mem-2")] == ["RunStarted"]
    buffered.close()
    assert store.read_run("mem-2")  # the backing store stays open


def test_unvalidated_events_are_the_validated_ones(home: dict[str, Any]) -> None:
    """Check-only replays build served calls (and their own steps) without validating: for
    every recorded payload the event must equal the validated one, and a payload that lacks
    a field (an older version's) is validated, its default filled in."""
    store = home["store"]
    for run_id in (*home["completed"][:2], *home["failed"][:2]):
        for stored in store.read_run(run_id):
            kind = store.catalogue.model(stored.type)
            built = unvalidated(kind, dict(stored.payload))
            assert built == kind.model_validate(stored.payload)
            assert built.model_dump(mode="json") == stored.payload
    call = next(e for e in store.read_run(home["completed"][0]) if e.type == "ModelCalled")
    older = {k: v for k, v in call.payload.items() if k != "reasoning_tokens"}
    assert unvalidated(ModelCalled, older) == ModelCalled.model_validate(call.payload)


def test_departure_of_identical_streams_is_none(home: dict[str, Any]) -> None:
    events = home["store"].read_run(home["completed"][0])
    assert departure(events, events, None) is None


def app() -> Any:
    from steplog.cli import app as cli

    return cli


def test_bench_replay_check_reports_both_ratios() -> None:
    shown = runner.invoke(app(), ["bench", "replay", "--check", "--runs", "16", "--json"])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.stdout)
    assert report["runs"] == 16 and report["unchanged"] == 16
    assert report["identical_written"] == report["write_runs"] == 16
    assert report["check_ratio"] == pytest.approx(report["check_seconds"] / report["read_seconds"])
    assert report["write_ratio"] == pytest.approx(
        report["write_seconds"] / report["write_read_seconds"]
    )
    assert report["met"] == (report["check_wall_seconds"] <= 60 and report["check_ratio"] <= 3)
    assert report["read_seconds"] > 0 and report["check_seconds"] > 0
    text = runner.invoke(app(), ["bench", "replay", "--check", "--runs", "8"])
    assert text.exit_code == 0 and "check-only replays" in text.stdout
    assert "8/8 unchanged" in text.stdout


def test_check_runs_checks_a_batch_like_one_run_at_a_time(home: dict[str, Any]) -> None:
    store = home["store"]
    run_ids = [*home["completed"][:3], *home["failed"]]
    batch = check_runs(store, run_ids)
    assert [sample.as_dict() for sample in batch] == [
        check_run(store, run_id).as_dict() for run_id in run_ids
    ]
    assert all(sample.passed for sample in batch)
    # the batch looks at the scenario folders once, when it starts: an edit made before it is
    # seen for every run (runs that stopped before the edited step still pass)
    edit_scenario(home, 'name = "judge"\nfields = ["verdict"]', 'name = "judge"\nfields = ["ok"]')
    edited = check_runs(store, run_ids)
    assert [sample.as_dict() for sample in edited] == [
        check_run(store, run_id).as_dict() for run_id in run_ids
    ]
    assert not all(sample.passed for sample in edited)
    assert all(
        not s.passed
        for s, run_id in zip(edited, run_ids, strict=True)
        if run_id in home["completed"]
    )
    missing = check_runs(store, ["no-such-run", run_ids[0]])
    assert "no run 'no-such-run'" in str(missing[0].error) and not missing[1].passed


def test_same_as_agrees_with_comparing_the_serialized_streams(home: dict[str, Any]) -> None:
    """The check-only buffer compares fields before serializing; its verdict must be what
    comparing the JSON forms gives, for alike runs and for every kind of difference."""
    store = home["store"]
    recorded = store.read_run(home["completed"][0])
    buffered = BufferedStore(store, check_only=True)
    events = [e.to_event() for e in recorded]
    buffered.append("mem-1", events, expected_version=0)
    assert buffered.same_as("mem-1", recorded) and same_stream(recorded, buffered.read_run("mem-1"))
    assert buffered.version("mem-1") == len(recorded)

    def verdicts(changed: list[Any]) -> tuple[bool, bool]:
        other = BufferedStore(store, check_only=True)
        other.append("mem-2", changed, expected_version=0)
        fast = other.same_as("mem-2", recorded)
        return fast, same_stream(recorded, other.read_run("mem-2"))

    step = next(i for i, e in enumerate(events) if isinstance(e, StepCompleted))
    longer = [*events, RunCompleted(output={})]
    relinked = [events[0].model_copy(update={"replay_of": "x"}), *events[1:]]
    reseeded = [events[0].model_copy(update={"seed": -1}), *events[1:]]
    as_tuple = events[step].model_copy(
        update={"output": {k: (v,) for k, v in events[step].output.items()}}
    )
    as_list = events[step].model_copy(
        update={"output": {k: [v] for k, v in events[step].output.items()}}
    )
    for changed, alike in (
        (longer, False),
        (relinked, True),  # replay links are not behaviour
        (reseeded, False),
        ([*events[:step], as_tuple, *events[step + 1 :]], False),
        ([*events[:step], as_list, *events[step + 1 :]], False),
        ([*events[:step], *events[step + 1 :]], False),
    ):
        assert verdicts(changed) == (alike, alike)
    stored_tuple = BufferedStore(store, check_only=True)
    stored_tuple.append("mem-3", [*events[:step], as_list, *events[step + 1 :]], 0)
    written = stored_tuple.read_run("mem-3")
    tuple_store = BufferedStore(store, check_only=True)
    tuple_store.append("mem-4", [*events[:step], as_tuple, *events[step + 1 :]], 0)
    # a tuple's JSON form is a list: the fields differ, the JSON forms are the same
    assert tuple_store.same_as("mem-4", written) and same_stream(
        written, tuple_store.read_run("mem-4")
    )


HEADER_FIELDS = [
    "run_id",
    "scenario",
    "model_version",
    "agent",
    "agent_version",
    "task_instance_id",
    "task_type",
    "seed",
    "config",
    "input",
    "planned_steps",
    "source",
    "gate_policy",
    "replay_of",
    "forked_from",
    "fork_step",
    "started_at",
    "status",
    "failure_step",
    "failure_step_index",
    "failure_type",
    "failure_message",
    "budget_exceeded",
    "output",
    "ended_at",
    "session_id",
    "user_id",
    "gaps",
    "rerun_of",
]


def test_the_header_fold_agrees_with_the_full_fold(home: dict[str, Any]) -> None:
    """A check-only replay folds only the recording's header and ending: for finished, failed,
    aborted and waiting runs they must be what the full fold says."""
    store = home["store"]
    edit_scenario(home, "max_retry_per_step = 1", "max_retry_per_step = 1\nmax_steps = 2")
    aborted = execute_all(
        store.url,
        plan_runs(
            get_scenario("gatekeeper"), model_version="v2", runs=1, seed=9, run_id_prefix="abort-"
        ),
    )
    gated = execute_all(
        store.url,
        plan_runs(
            get_scenario("data-migration"),
            model_version=get_scenario("data-migration").versions_for_demo()[0],
            runs=2,
            seed=1,
            gate_policy="manual",
            run_id_prefix="gated-",
        ),
    )
    run_ids = [*home["completed"], *home["failed"], *(o.run_id for o in aborted + gated)]
    statuses = set()
    for run_id in run_ids:
        events = store.read_run(run_id)
        full, lean = fold(events), header(events)
        statuses.add(full.status)
        assert [getattr(lean, f) for f in HEADER_FIELDS] == [
            getattr(full, f) for f in HEADER_FIELDS
        ]
    assert {"completed", "failed", "aborted", "awaiting_approval"} <= statuses


def test_a_batch_keeps_one_buffer_and_nothing_in_it(
    home: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """check_runs and check_set hold each replay's events in one buffer for the batch: every
    run's are dropped once compared, and a replay that raised leaves none behind. Annotated
    samples (added to a set after they ran) pass, as the annotations are not behaviour."""
    store = home["store"]
    buffer = BufferedStore(store, check_only=True)
    annotated = home["failed"][0]
    assert any(e.type == "SampleAddedToRegressionSet" for e in store.read_run(annotated))
    for run_id in [*home["completed"][:2], annotated]:
        sample = check_run(store, run_id, buffer=buffer)
        assert sample.passed, sample.summary
        assert not buffer._events and not buffer._runs
    assert check_set(store, "gate").passed

    import steplog.replay._scenario as replay_module

    def broken(*args: Any, **kwargs: Any) -> Any:
        target = args[0]
        target.append(kwargs["run_id"], [RunCompleted(output={})], 0)
        raise SteplogError("the harness broke")

    monkeypatch.setattr(replay_module, "launch", broken)
    sample = check_run(store, home["completed"][0], buffer=buffer)
    assert not sample.passed and "the harness broke" in sample.summary
    assert not buffer._events and not buffer._runs


def test_take_recorded_serves_the_recorded_payload_or_lets_take_decide(
    home: dict[str, Any],
) -> None:
    """The check's served calls are the recording's own payloads when the call and its request
    are the recorded ones; a changed request is still refused with take's divergence."""
    from steplog.recorder.divergence import Divergence
    from steplog.recorder.playback import Playback

    events = home["store"].read_run(home["completed"][0])
    model = next(e for e in events if e.type == "ModelCalled")
    playback = Playback([model])
    payload = model.payload
    request = dict(payload["request"])
    served = playback.take_recorded(
        "ModelCalled", payload["step_index"], name=payload["model"], request=request
    )
    assert served is payload and playback.leftover() is None
    changed = {**request, "attempt": request["attempt"] + 1}
    with pytest.raises(Divergence) as raised:
        Playback([model]).take_recorded(
            "ModelCalled", payload["step_index"], name=payload["model"], request=changed
        )
    with pytest.raises(Divergence) as expected:
        Playback([model]).take(
            "ModelCalled", payload["step_index"], name=payload["model"], request=changed
        )
    assert raised.value.as_dict() == expected.value.as_dict()
    # another model name is refused too, unless names are not checked (a fork's early steps)
    with pytest.raises(Divergence):
        Playback([model]).take_recorded(
            "ModelCalled", payload["step_index"], name="other", request=request
        )
    unchecked = Playback([model]).take_recorded(
        "ModelCalled", payload["step_index"], name="other", request=request, check_name=False
    )
    assert unchecked is payload


def test_the_check_recorder_keeps_the_recorded_event_only_when_it_is_that_one(
    home: dict[str, Any],
) -> None:
    """A check-only replay's recorder keeps an event the code records from its fields as the
    recorded event itself only when it is the one at its place (same type, known to the
    buffer's catalogue, every field named, equal values); anything else is built as a writing
    recorder builds it, and the buffer's verdict and read-back are what the built events give."""
    from steplog.harness.check_recorder import CheckRecorder

    store = home["store"]
    recorded = store.read_run(home["failed"][0])
    recorded = [e for e in recorded if e.type != "SampleAddedToRegressionSet"]
    buffer = BufferedStore(store, check_only=True)
    recorder = CheckRecorder(buffer, "mem-1", recorded)
    recorder.record(recorded[0].to_event())
    recorder.flush()
    for event in recorded[1:]:
        recorder.record_fields(store.catalogue.model(event.type), dict(event.payload))
        assert [p.event for p in recorder.pending] == [event.to_event()]
        recorder.flush()
    kept = buffer._events["mem-1"]
    seen: set[str] = {"RunStarted"}
    for item, event in zip(kept[1:], recorded[1:], strict=True):
        # the first event of a type is checked against the catalogue (built); later ones are
        # the recorded ones themselves
        assert (item is event) == (event.type in seen), event.type
        seen.add(event.type)
    assert any(isinstance(item, StoredEvent) for item in kept)
    assert buffer.same_as("mem-1", recorded)
    back = buffer.read_run("mem-1")
    assert same_stream(recorded, back)
    assert [e.payload for e in back[1:]] == [e.payload for e in recorded[1:]]

    # a changed value, an older form (a field left to its default) and a wrapped event are
    # built, and the verdict is the serialized streams'
    step = next(i for i, e in enumerate(recorded) if e.type == "StepCompleted")
    call = next(i for i, e in enumerate(recorded) if e.type == "ModelCalled" and i > step)
    for label, fields_at in (
        ("changed", {step: {**recorded[step].payload, "output_summary": "other"}}),
        (
            "older",
            {call: {k: v for k, v in recorded[call].payload.items() if k != "reasoning_tokens"}},
        ),
    ):
        other = BufferedStore(store, check_only=True)
        other.known_types.update(buffer.known_types)
        other._accepted.update(buffer._accepted)
        again = CheckRecorder(other, "mem-2", recorded)
        again.record(recorded[0].to_event())
        for index, event in enumerate(recorded[1:], start=1):
            fields = fields_at.get(index, dict(event.payload))
            again.record_fields(store.catalogue.model(event.type), fields)
        again.flush()
        items = other._events["mem-2"]
        changed_at = next(iter(fields_at))
        assert not isinstance(items[changed_at], StoredEvent), label
        assert all(items[i] is recorded[i] for i in range(1, len(recorded)) if i != changed_at), (
            label
        )
        assert other.same_as("mem-2", recorded) == same_stream(recorded, other.read_run("mem-2")), (
            label
        )
        assert other.same_as("mem-2", recorded) == (label == "older"), label


def test_same_as_agrees_with_the_serialized_streams_for_recorded_events_kept(
    home: dict[str, Any],
) -> None:
    """A check's buffer may hold the recorded events themselves (kept by its recorder) beside
    built ones: its verdict must still be what comparing the JSON forms gives."""
    store = home["store"]
    recorded = store.read_run(home["completed"][0])
    events = [e.to_event() for e in recorded]
    step = next(i for i, e in enumerate(events) if isinstance(e, StepCompleted))
    as_list = events[step].model_copy(
        update={"output": {k: [v] for k, v in events[step].output.items()}}
    )
    reseeded = events[0].model_copy(update={"seed": -1})
    relinked = events[0].model_copy(update={"replay_of": "x"})
    for label, changed, alike in (
        ("all recorded", [events[0], *recorded[1:]], True),
        ("relinked", [relinked, *recorded[1:]], True),
        ("reseeded", [reseeded, *recorded[1:]], False),
        ("mixed", [events[0], *recorded[1:step], events[step], *recorded[step + 1 :]], True),
        ("changed", [events[0], *recorded[1:step], as_list, *recorded[step + 1 :]], False),
        ("shorter", [events[0], *recorded[1:-1]], False),
        ("longer", [events[0], *recorded[1:], RunCompleted(output={})], False),
        ("moved", [events[0], *recorded[2:], recorded[1]], False),
    ):
        other = BufferedStore(store, check_only=True)
        other.append("warm", events, 0)  # every type known, as in a batch
        other.keep("mem", changed, 0)
        serialized = same_stream(recorded, other.read_run("mem"))
        assert other.same_as("mem", recorded) == serialized == alike, label


def test_loop_detection_in_a_check_is_the_fingerprint_comparison(home: dict[str, Any]) -> None:
    """A check compares a retry's response with the previous one by value before hashing:
    the verdict must be the fingerprints' for the JSON values a recording holds (equal,
    reordered, changed, and equal-but-not-alike such as 1 and 1.0)."""
    from steplog.canonical import fingerprint
    from steplog.harness.check_recorder import CheckRecorder
    from steplog.harness.context import RunContext

    store = home["store"]
    scenario = get_scenario("gatekeeper")
    buffer = BufferedStore(store, check_only=True)
    context = RunContext(
        CheckRecorder(buffer, "mem-1", []), scenario, scenario.instance("g-1"), "v1", 1, 0.0
    )
    assert context._check_only
    ok = {"status": "ok", "output": {"value": 1.5, "rows": [1, 2]}}
    for previous, response in (
        (ok, dict(ok)),
        (ok, {"output": {"rows": [1, 2], "value": 1.5}, "status": "ok"}),
        (ok, {"status": "ok", "output": {"value": 1.6, "rows": [1, 2]}}),
        (ok, {"status": "ok", "output": {"value": 1.5, "rows": [2, 1]}}),
        ({"status": "ok", "output": {"value": 1}}, {"status": "ok", "output": {"value": 1.0}}),
        ({"status": "ok", "output": {"value": True}}, {"status": "ok", "output": {"value": 1}}),
    ):
        context._response = response
        expected = fingerprint("response", response) == fingerprint("response", previous)
        assert context.repeats(previous) == expected, (previous, response)


def test_samples_that_could_not_be_checked_are_not_said_to_behave_differently() -> None:
    # issue 35: the gate said "13/13 samples ... behave differently" when none could be checked
    from steplog.replay import SampleCheck, SetCheck

    why = "run 'r0' is a run of scenario 'gone', which is not registered"
    unchecked = [
        SampleCheck(run_id=f"r{i}", passed=False, summary=f"cannot be checked: {why}", error=why)
        for i in range(13)
    ]
    gate = SetCheck(regression_set="gate", samples=unchecked)
    assert not gate.passed and len(gate.unchecked) == 13
    assert gate.verdict == f"regression set 'gate': 13/13 could not be checked ({why})"
    assert "behave differently" not in gate.verdict
    changed = SampleCheck(run_id="c", passed=False, summary="diverged at step 0 (fetch), call 1")
    mixed = SetCheck(regression_set="gate", samples=[changed, *unchecked[:2]])
    assert mixed.verdict == (
        "regression set 'gate': 1/3 samples behave differently with the current code; "
        f"2/3 could not be checked ({why})"
    )
    assert mixed.as_dict()["unchecked"] == 2 and mixed.as_dict()["failed"] == 3
