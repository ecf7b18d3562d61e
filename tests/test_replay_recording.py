"""The recording as a check-only replay reads it (``replay_recording``): the seq, type, version
and payload of each event exactly as ``read_run`` gives them, and a batch's reads on one
connection (SQLite) that falls back to a fresh one when it fails."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.events import Scored, ScoredV1, scored_catalogue

from steplog import EventStore
from steplog.events import Catalogue
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import registered_scenarios
from steplog.replay import NO_ID, NOT_READ, BufferedStore, check_run, check_runs, read_recording


def _seeded(url: str, runs: int = 6) -> tuple[EventStore, list[str]]:
    store = EventStore.open(url)
    spec = next(iter(registered_scenarios().values()))
    version = spec.versions_for_demo()[0]
    plans = plan_runs(spec, model_version=version, runs=runs, seed=4, run_id_prefix="rec-")
    return store, [outcome.run_id for outcome in execute_all(store.url, plans)]


def _what_a_check_reads(events: list[Any]) -> list[tuple[Any, ...]]:
    return [(e.run_id, e.seq, e.type, e.schema_version, e.payload) for e in events]


def test_read_recording_is_read_run_without_ids_and_times(store_url: str) -> None:
    store, run_ids = _seeded(store_url)
    try:
        for run_id in run_ids:
            events = read_recording(store, run_id)
            assert _what_a_check_reads(events) == _what_a_check_reads(store.read_run(run_id))
            assert {(e.position, e.event_id, e.recorded_at) for e in events} == {
                (-1, NO_ID, NOT_READ)
            }
        assert read_recording(store, "no-such-run") == []
        # a buffer of replays reads runs its own way: read with its read_run
        buffer = BufferedStore(store, check_only=True)
        assert read_recording(buffer, run_ids[0]) == buffer.read_run(run_ids[0])
    finally:
        store.close()


def test_read_recording_upcasts_old_payloads(store_url: str) -> None:
    old = EventStore.open(store_url, catalogue=Catalogue([ScoredV1]))
    old.append("r", [ScoredV1(percent=80)])
    old.close()
    store = EventStore.open(store_url, catalogue=scored_catalogue())
    try:
        (event,) = read_recording(store, "r")
        assert (event.schema_version, event.payload) == (2, {"score": 0.8})
        assert event.to_event(store.catalogue) == Scored(score=0.8)
    finally:
        store.close()


def test_a_batch_reads_on_one_connection_and_recovers_from_a_bad_one(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_ids = _seeded(f"sqlite:///{tmp_path}/batch.db")
    try:
        buffer = BufferedStore(store, check_only=True)
        first = buffer.recording(run_ids[0])
        kept = buffer._reader
        assert kept is not None
        assert _what_a_check_reads(first) == _what_a_check_reads(store.read_run(run_ids[0]))
        buffer.recording(run_ids[1])
        assert buffer._reader is kept  # the same connection for the batch
        kept.connection.dbapi_connection.close()  # type: ignore[union-attr]  # it goes bad
        again = buffer.recording(run_ids[1])  # read on a fresh connection instead
        assert _what_a_check_reads(again) == _what_a_check_reads(store.read_run(run_ids[1]))
        assert buffer._reader is None
        buffer.recording(run_ids[2])
        assert buffer._reader is not None
        buffer.close()
        assert buffer._reader is None
        # the batch closes its buffer's connection, and checks as one run at a time does
        closed: list[BufferedStore] = []
        close = BufferedStore.close

        def tracked(self: BufferedStore) -> None:
            closed.append(self)
            close(self)

        monkeypatch.setattr(BufferedStore, "close", tracked)
        batch = check_runs(store, run_ids)
        assert len(closed) == 1 and closed[0]._reader is None
        assert [s.as_dict() for s in batch] == [check_run(store, r).as_dict() for r in run_ids]
        assert all(s.passed for s in batch)
    finally:
        store.close()


def test_a_batch_counts_its_replays_run_ids_on_from_one_uuid7(tmp_path: Any) -> None:
    import uuid

    store = EventStore.open(f"sqlite:///{tmp_path}/ids.db")
    try:
        buffer = BufferedStore(store, check_only=True)
        ids = [buffer.replay_id() for _ in range(3)]
        assert len(set(ids)) == 3
        assert [uuid.UUID(i).int - uuid.UUID(ids[0]).int for i in ids] == [0, 1, 2]
        assert uuid.UUID(ids[0]).version == 7
        assert all(str(uuid.UUID(i)) == i for i in ids)
    finally:
        store.close()
