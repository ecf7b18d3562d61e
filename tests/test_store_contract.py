"""The event store contract, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from helpers.events import Scored, ScoredV1, scored_catalogue

from steplog.errors import (
    ConcurrencyError,
    IdempotencyError,
    InvalidEventError,
    PayloadTooLargeError,
)
from steplog.events import (
    Catalogue,
    Event,
    RunCompleted,
    RunStarted,
    StepCompleted,
    StepStarted,
    catalogue,
)
from steplog.store import EventStore, NewEvent


def started(run: str = "r") -> RunStarted:
    return RunStarted(scenario="sandbox", model_version="sim-v1", agent="chain", seed=7,
                      input={"run": run})  # fmt: skip


def steps(count: int, start: int = 0) -> list[Event]:
    return [StepStarted(step=f"s{i}", step_index=i) for i in range(start, start + count)]


def test_empty_store(store: EventStore) -> None:
    assert store.last_position() == 0
    assert list(store.read_all()) == []
    assert store.read_run("nope") == []
    assert store.version("nope") == 0


def test_append_assigns_gapless_seq_and_increasing_positions(store: EventStore) -> None:
    assert store.append("a", [started("a"), *steps(2)], expected_version=0) == [1, 2, 3]
    assert store.append("b", [started("b")], expected_version=0) == [4]
    assert store.append("a", steps(1, start=2), expected_version=3) == [5]
    run = store.read_run("a")
    assert [e.seq for e in run] == [0, 1, 2, 3]
    assert [e.position for e in run] == [1, 2, 3, 5]
    assert [e.type for e in run] == ["RunStarted", "StepStarted", "StepStarted", "StepStarted"]
    assert run[0].to_event() == started("a")
    assert store.version("a") == 4
    assert store.last_position() == 5
    assert [e.position for e in store.read_all()] == [1, 2, 3, 4, 5]


def test_stored_event_keeps_id_time_and_payload(store: EventStore) -> None:
    event_id = uuid.uuid4()
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    store.append("r", [NewEvent(started(), event_id=event_id, recorded_at=when)])
    (stored,) = store.read_run("r")
    assert stored.event_id == event_id
    assert stored.recorded_at == when
    assert stored.schema_version == RunStarted.schema_version
    assert stored.payload["input"] == {"run": "r"}
    assert stored.to_json()["event_id"] == str(event_id)


def test_default_event_ids_are_time_ordered_uuid7(store: EventStore) -> None:
    store.append("r", steps(50))
    ids = [e.event_id for e in store.read_run("r")]
    assert all(i.version == 7 for i in ids)
    assert ids == sorted(ids)


def test_conflicting_expected_version_raises_and_stores_nothing(store: EventStore) -> None:
    store.append("r", [started()], expected_version=0)
    with pytest.raises(ConcurrencyError) as info:
        store.append("r", steps(3), expected_version=0)
    assert (info.value.expected, info.value.actual) == (0, 1)
    assert "run 'r' is at version 1" in str(info.value)
    with pytest.raises(ConcurrencyError):
        store.append("r", steps(1), expected_version=5)
    assert store.version("r") == 1
    assert store.last_position() == 1


def test_none_expected_version_appends_at_the_end(store: EventStore) -> None:
    store.append("r", [started()])
    store.append("r", steps(2))
    assert [e.seq for e in store.read_run("r")] == [0, 1, 2]


def test_resend_with_same_ids_is_a_noop_returning_original_positions(store: EventStore) -> None:
    batch = [NewEvent(started()), NewEvent(StepStarted(step="a", step_index=0))]
    first = store.append_batch("r", batch, expected_version=0)
    store.append("other", [started("other")])
    again = store.append_batch("r", batch, expected_version=0)
    assert again.positions == first.positions == [1, 2]
    assert again.duplicate and not first.duplicate
    # Without an expected version, too (the unique index catches it).
    assert store.append("r", batch) == [1, 2]
    assert store.last_position() == 3
    assert store.version("r") == 2


def test_same_id_with_different_content_is_an_error(store: EventStore) -> None:
    event_id = uuid.uuid4()
    store.append("r", [NewEvent(started(), event_id=event_id)])
    with pytest.raises(IdempotencyError, match=f"{event_id}.*different content"):
        store.append("r", [NewEvent(started("changed"), event_id=event_id)], expected_version=0)
    with pytest.raises(IdempotencyError, match="different content"):
        store.append("r", [NewEvent(started("changed"), event_id=event_id)])
    with pytest.raises(IdempotencyError, match="different content"):
        store.append("elsewhere", [NewEvent(started(), event_id=event_id)])
    assert store.last_position() == 1


def test_partially_stored_batch_is_refused_whole(store: EventStore) -> None:
    known = NewEvent(started())
    store.append("r", [known])
    with pytest.raises(IdempotencyError, match="stored whole or not at all"):
        store.append("r", [known, NewEvent(StepStarted(step="a", step_index=0))], 0)
    assert store.last_position() == 1


def test_duplicate_ids_inside_a_batch_are_refused(store: EventStore) -> None:
    twice = NewEvent(started())
    with pytest.raises(InvalidEventError, match=r"event #1 .*repeats id"):
        store.append("r", [twice, twice])
    assert store.last_position() == 0


def test_payload_size_limit_rejects_the_whole_batch(store_url: str) -> None:
    store = EventStore.open(store_url, max_payload_bytes=2_000)
    try:
        big = StepCompleted(step="s", step_index=1, output={"text": "x" * 5_000})
        with pytest.raises(PayloadTooLargeError) as info:
            store.append("r", [started(), big], expected_version=0)
        assert "event #1 (StepCompleted" in str(info.value)
        assert "the limit is 2,000 bytes" in str(info.value)
        assert store.last_position() == 0
    finally:
        store.close()


def test_default_payload_limit_is_one_mebibyte(store: EventStore) -> None:
    assert store.max_payload_bytes == 1024 * 1024
    just_under = StepCompleted(step="s", step_index=0, output={"t": "x" * (1024 * 1024 - 200)})
    store.append("r", [just_under])
    over = StepCompleted(step="s", step_index=0, output={"t": "x" * (1024 * 1024)})
    with pytest.raises(PayloadTooLargeError):
        store.append("r", [over])
    assert store.version("r") == 1


@pytest.mark.parametrize("bad", ["", "   ", "x" * 256, "tab\there", 42, None])
def test_bad_run_ids_are_refused(store: EventStore, bad: object) -> None:
    with pytest.raises(InvalidEventError, match="run id"):
        store.append(bad, [started()])  # type: ignore[arg-type]


def test_non_events_and_foreign_models_are_refused(store: EventStore) -> None:
    with pytest.raises(InvalidEventError, match="not a steplog Event"):
        store.append("r", [{"type": "RunStarted"}])  # type: ignore[list-item]

    class Unregistered(Event):
        value: int = 1

    with pytest.raises(InvalidEventError, match="unknown event type 'Unregistered'"):
        store.append("r", [Unregistered()])
    assert store.last_position() == 0


def test_empty_batch_is_a_noop(store: EventStore) -> None:
    assert store.append("r", []) == []
    assert store.last_position() == 0


def test_read_run_from_seq(store: EventStore) -> None:
    store.append("r", [started(), *steps(4)])
    assert [e.seq for e in store.read_run("r", from_seq=3)] == [3, 4]


def test_read_all_pages_through_everything_in_order(store: EventStore) -> None:
    for run in range(7):
        store.append(f"run-{run}", [started(), *steps(run)])
    total = sum(1 + run for run in range(7))
    everything = list(store.read_all(page_size=4))
    assert [e.position for e in everything] == list(range(1, total + 1))
    assert [e.position for e in store.read_all(after_position=10, limit=5, page_size=2)] == [
        11, 12, 13, 14, 15,
    ]  # fmt: skip
    assert list(store.read_all(after_position=total)) == []
    assert [e.position for e in store.read_all(limit=3)] == [1, 2, 3]


def test_read_all_is_a_lazy_stream(store: EventStore) -> None:
    store.append("r", steps(30))
    stream = store.read_all(page_size=10)
    first = next(stream)
    store.append("r", steps(5, start=30))  # appended while the reader is mid-way
    rest = list(stream)
    assert first.position == 1
    assert [e.position for e in rest] == list(range(2, 36))


def test_quarantine_keeps_raw_input_and_reason(store: EventStore) -> None:
    assert store.count_quarantined() == 0
    record_id = store.quarantine(source="jsonl:x", location="line 3", reason="bad", raw="{]")
    assert record_id >= 1
    assert store.count_quarantined() == 1


def test_count_runs(store: EventStore) -> None:
    store.append("a", [started()])
    store.append("b", [started(), *steps(2)])
    assert store.count_runs() == 2


def test_old_events_are_upcast_on_read_and_never_rewritten(store_url: str) -> None:
    old = EventStore.open(store_url, catalogue=Catalogue([ScoredV1]))
    old.append("r", [ScoredV1(percent=80)])
    old.close()

    current = scored_catalogue()
    store = EventStore.open(store_url, catalogue=current)
    try:
        (event,) = store.read_run("r")
        assert (event.schema_version, event.payload) == (2, {"score": 0.8})
        assert event.to_event(current) == Scored(score=0.8)
        store.append("r", [Scored(score=0.5)])
        assert [e.payload for e in store.read_all()] == [{"score": 0.8}, {"score": 0.5}]
    finally:
        store.close()
    # The stored v1 row itself is untouched.
    raw = EventStore.open(store_url, catalogue=Catalogue())
    try:
        assert [(e.schema_version, e.payload) for e in raw.read_all()] == [
            (1, {"percent": 80}),
            (2, {"score": 0.5}),
        ]
    finally:
        raw.close()


def test_events_of_unknown_types_are_still_readable(store_url: str) -> None:
    store = EventStore.open(store_url)
    try:
        store.append("r", [started()])
    finally:
        store.close()
    blind = EventStore.open(store_url, catalogue=Catalogue())
    try:
        (event,) = blind.read_all()
        assert event.type == "RunStarted"
        assert event.payload["scenario"] == "sandbox"
    finally:
        blind.close()


def test_typed_round_trip_of_every_field(store: EventStore) -> None:
    done = RunCompleted(output={"rows": [1, 2, 3], "ok": True, "nested": {"a": None}})
    store.append("r", [started(), done])
    assert [e.to_event() for e in store.read_run("r")] == [started(), done]
    assert catalogue.model("RunCompleted") is RunCompleted


def test_append_new_runs_stores_many_runs_in_one_transaction(store: EventStore) -> None:
    positions = store.append_new_runs(
        [("a", [started("a"), *steps(2)]), ("b", [started("b")]), ("c", [])]
    )
    assert positions == [[1, 2, 3], [4], []]
    assert [e.seq for e in store.read_run("a")] == [0, 1, 2]
    assert store.version("b") == 1 and store.version("c") == 0


def test_append_new_runs_is_all_or_nothing(store: EventStore) -> None:
    store.append("exists", [started("exists")], 0)
    with pytest.raises(ConcurrencyError, match="exists"):
        store.append_new_runs([("fresh", [started("fresh")]), ("exists", [started("x")])])
    assert store.version("fresh") == 0 and store.last_position() == 1
    event = NewEvent(started("dup"))
    store.append("dup", [event], 0)
    with pytest.raises(IdempotencyError, match="one by one"):
        store.append_new_runs([("other", [started("other")]), ("dup-2", [event])])
    assert store.version("other") == 0 and store.last_position() == 2
    with pytest.raises(InvalidEventError, match="appears twice"):
        store.append_new_runs([("twin", [started()]), ("twin", [started()])])


def test_the_same_bad_record_is_quarantined_once(store: EventStore) -> None:
    first = store.quarantine(source="jsonl:a", location="line 3", reason="old", raw="{bad")
    again = store.quarantine(source="jsonl:a", location="line 3", reason="new", raw="{bad")
    other = store.quarantine(source="jsonl:a", location="line 4", reason="x", raw="{bad")
    assert first == again != other
    (kept, _) = store.quarantined()
    assert kept.reason == "new" and store.count_quarantined() == 2
