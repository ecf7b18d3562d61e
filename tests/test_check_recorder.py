"""A check-only replay's recorder keeps the recorded event for the harness's validated events
(failures, gates, limits: ``record_validated``) only when it is the one at its place; anything
else is validated as a writing recorder validates it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from steplog import EventStore
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.check_recorder import CheckRecorder
from steplog.harness.scenario import registered_scenarios
from steplog.recorder import RunRecorder
from steplog.replay import BufferedStore, same_stream
from steplog.store import StoredEvent

VALIDATED = {
    "StepAttemptFailed",
    "ValidationFailed",
    "StepFailed",
    "RunFailed",
    "ApprovalRequested",
    "ApprovalDecided",
    "BudgetExceeded",
    "RunAborted",
}


@pytest.fixture
def recording(tmp_path: Any) -> Any:
    """A store and the events of a seeded run that has failed attempts or gates."""
    store = EventStore.open(f"sqlite:///{tmp_path}/rec.db")
    plans = [
        plan
        for spec in registered_scenarios().values()
        for plan in plan_runs(spec, model_version=spec.versions_for_demo()[0], runs=6, seed=2)
    ]
    execute_all(store.url, plans)
    runs = [store.read_run(plan.run_id) for plan in plans]
    chosen = max(runs, key=lambda events: sum(e.type in VALIDATED for e in events))
    assert sum(e.type in VALIDATED for e in chosen) >= 2
    yield store, chosen
    store.close()


def _replayed(store: EventStore, recorded: list[StoredEvent], changed: dict[int, Any]) -> Any:
    buffer = BufferedStore(store, check_only=True)
    recorder = CheckRecorder(buffer, "mem-1", recorded)
    recorder.record(recorded[0].to_event())
    for index, event in enumerate(recorded[1:], start=1):
        fields = changed.get(index, dict(event.payload))
        kind = store.catalogue.model(event.type)
        if event.type in VALIDATED:
            recorder.record_validated(kind, **fields)
        else:
            recorder.record_fields(kind, fields)
        recorder.flush()
    return buffer, buffer._events["mem-1"]


def test_validated_events_equal_to_the_recording_are_kept_as_recorded(recording: Any) -> None:
    store, recorded = recording
    buffer, kept = _replayed(store, recorded, {})
    seen: set[str] = {"RunStarted"}
    for item, event in zip(kept[1:], recorded[1:], strict=True):
        # the first of a type is checked against the catalogue (built, validated); later ones
        # are the recorded events themselves
        assert (item is event) == (event.type in seen), event.type
        seen.add(event.type)
    assert any(
        item is event and event.type in VALIDATED
        for item, event in zip(kept, recorded, strict=True)
    )
    assert buffer.same_as("mem-1", recorded)
    assert same_stream(recorded, buffer.read_run("mem-1"))


def test_other_validated_events_are_validated(recording: Any) -> None:
    store, recorded = recording
    places = [i for i, e in enumerate(recorded) if e.type in VALIDATED]
    at = places[-1]  # a later one: its type is known to the buffer by then, or not at all
    payload = recorded[at].payload
    key = next(k for k in ("message", "reason", "summary") if k in payload)
    buffer, kept = _replayed(store, recorded, {at: {**payload, key: "other"}})
    assert not isinstance(kept[at], StoredEvent)
    assert kept[at].__pydantic_fields_set__  # built by validation
    assert not buffer.same_as("mem-1", recorded)
    assert not same_stream(recorded, buffer.read_run("mem-1"))
    # invalid values raise, as they do when a writing replay or a live run records them
    invalid = {"step_index": -1} if "step_index" in payload else {key: 1}
    with pytest.raises(ValidationError):
        _replayed(store, recorded, {at: {**payload, **invalid}})
    writer = RunRecorder(store, "w-1")
    with pytest.raises(ValidationError):
        writer.record_validated(store.catalogue.model(recorded[at].type), **{**payload, **invalid})
    writer.record_validated(store.catalogue.model(recorded[at].type), **payload)
    assert [p.event.model_dump(mode="json") for p in writer.pending] == [payload]
