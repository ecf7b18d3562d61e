"""Bad input at the store's doors: every bad record is refused clearly, nothing else is lost."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers.events import ScoredV1, scored_catalogue
from sqlalchemy import text

from steplog.errors import InvalidEventError, SchemaNotCurrentError
from steplog.events import Catalogue, ClockRead, ModelCalled, StepStarted
from steplog.ingest.jsonl import RAW_KEPT, import_jsonl
from steplog.store import EventStore, NewEvent, create_engine_for

GOOD = {"run_id": "good", "type": "StepStarted", "payload": {"step": "a", "step_index": 0}}


def write_lines(path: Path, *lines: bytes) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def line(**record: object) -> bytes:
    return json.dumps(record).encode()


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (line(run_id="r", type="StepStarted", payload={"step": "a\u0000b", "step_index": 0}),
         "NUL character"),
        (b'{"run_id": "r", "type": "StepStarted", "payload": {}}\x00', "not JSON"),
        (line(run_id="r", type=["StepStarted"], payload={}), "event type must be a string"),
        (line(run_id="r", type="StepStarted", recorded_at="0001-01-01T00:00:00+01:00",
              payload={"step": "a", "step_index": 0}), "is not an ISO 8601 timestamp"),
        (b'{"run_id": "\\ud800", "type": "StepStarted", "payload": {"step": "a", "step_index": 0}}',
         "not valid Unicode"),
        (b'{"run_id": "r", "type": "ClockRead", "payload": {"call_index": 0, "value": NaN}}',
         "finite number"),
        (line(run_id="r", event_id=0, type="StepStarted", payload={"step": "a", "step_index": 0}),
         "event_id must be a UUID string"),
        (line(run_id="r", event_id="nope", type="StepStarted",
              payload={"step": "a", "step_index": 0}), "is not a UUID"),
    ],
)  # fmt: skip
def test_each_bad_line_is_quarantined_and_the_good_one_after_it_stored(
    store: EventStore, tmp_path: Path, bad: bytes, reason: str
) -> None:
    path = write_lines(tmp_path / "in.jsonl", bad, line(**GOOD))
    report = import_jsonl(store, path)
    assert report.appended == 1
    assert [b.line_no for b in report.quarantined] == [1]
    assert reason in report.quarantined[0].reason
    (kept,) = store.quarantined()
    assert (kept.location, kept.source) == ("line 1", f"jsonl:{path}")
    assert reason in kept.reason
    assert "\x00" not in kept.raw
    assert store.version("good") == 1


def test_a_byte_order_mark_is_skipped(store: EventStore, tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + line(**GOOD) + b"\r\n")
    assert import_jsonl(store, path).appended == 1


def test_oversized_lines_are_never_held_whole_and_are_quarantined_by_hash(
    store_url: str, tmp_path: Path
) -> None:
    store = EventStore.open(store_url, max_payload_bytes=1_000)
    try:
        huge = line(run_id="r", type="StepStarted",
                    payload={"step": "x" * 300_000, "step_index": 0})  # fmt: skip
        path = write_lines(tmp_path / "big.jsonl", huge, line(**GOOD))
        report = import_jsonl(store, path)
        assert report.appended == 1
        (bad,) = report.quarantined
        assert f"line is {len(huge):,} bytes" in bad.reason
        assert "sha256" in bad.reason
        (kept,) = store.quarantined()
        assert len(kept.raw) <= RAW_KEPT
    finally:
        store.close()


def test_payload_over_the_limit_inside_the_line_limit(store_url: str, tmp_path: Path) -> None:
    store = EventStore.open(store_url, max_payload_bytes=1_000)
    try:
        big = line(run_id="r", type="StepStarted", payload={"step": "x" * 5_000, "step_index": 0})
        report = import_jsonl(store, write_lines(tmp_path / "p.jsonl", big, line(**GOOD)))
        assert report.appended == 1
        assert "the limit is 1,000 bytes" in report.quarantined[0].reason
    finally:
        store.close()


def test_lines_without_ids_are_stored_again_on_reimport(store: EventStore, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "noid.jsonl", line(**GOOD))
    import_jsonl(store, path)
    import_jsonl(store, path)
    assert store.version("good") == 2


def test_reimporting_an_export_after_a_schema_bump_adds_nothing(
    store_url: str, tmp_path: Path
) -> None:
    old = EventStore.open(store_url, catalogue=Catalogue([ScoredV1]))
    old.append("r", [ScoredV1(percent=40)])
    old.close()
    current = scored_catalogue()
    store = EventStore.open(store_url, catalogue=current)
    try:
        export = tmp_path / "export.jsonl"
        export.write_text("".join(json.dumps(e.to_json()) + "\n" for e in store.read_all()))
        report = import_jsonl(store, export)
        assert (report.appended, report.already_stored, report.quarantined) == (0, 1, [])
    finally:
        store.close()


def test_nan_in_typed_fields_is_refused_and_in_free_fields_kept_as_text(store: EventStore) -> None:
    with pytest.raises(ValueError, match="finite number"):
        ClockRead(call_index=0, value=float("nan"))
    call = ModelCalled(call_index=0, model="m", response={"score": float("nan")})
    store.append("r", [call])
    (event,) = store.read_run("r")
    assert event.payload["response"] == {"score": "NaN"}
    assert event.to_event() == ModelCalled(call_index=0, model="m", response={"score": "NaN"})


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_naive_timestamps_mean_utc_on_every_engine(store: EventStore, new_york: None) -> None:
    store.append("r", [NewEvent(StepStarted(step="a", step_index=0),
                                recorded_at=datetime(2026, 1, 1, 12))])  # fmt: skip
    (event,) = store.read_run("r")
    assert event.recorded_at == datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_nul_in_an_appended_payload_is_refused(store: EventStore) -> None:
    with pytest.raises(InvalidEventError, match="NUL character"):
        store.append("r", [StepStarted(step="a\x00", step_index=0)])
    store.append("r", [StepStarted(step="a\\u0000 is fine as text", step_index=0)])
    assert store.read_run("r")[0].payload["step"] == "a\\u0000 is fine as text"


def test_a_database_migrated_by_a_newer_steplog_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/future.db"
    EventStore.open(url).close()
    engine = create_engine_for(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(SchemaNotCurrentError, match="newer steplog; upgrade steplog"):
        EventStore.open(url)


@pytest.mark.postgres
def test_stores_in_different_schemas_do_not_wait_on_each_other(pg_schemas: object) -> None:
    from steplog.store import write_transaction

    first = EventStore.open(pg_schemas.new(migrate=True))  # type: ignore[attr-defined]
    second = EventStore.open(pg_schemas.new(migrate=True))  # type: ignore[attr-defined]
    done = threading.Event()
    try:
        with write_transaction(first.engine) as conn:
            first._lock_positions(conn)  # an append in progress in the first schema
            worker = threading.Thread(
                target=lambda: (
                    second.append("r", [StepStarted(step="a", step_index=0)]),
                    done.set(),
                )
            )
            worker.start()
            worker.join(timeout=10)
            assert done.is_set(), "an append in another schema waited on this one's lock"
    finally:
        first.close()
        second.close()


def test_unique_ids_within_a_batch_are_checked_by_value() -> None:
    same = uuid.uuid4()
    store = EventStore.__new__(EventStore)  # only _prepare is exercised: no database needed
    store.catalogue = Catalogue([StepStarted])
    store.max_payload_bytes = 1000
    batch = [
        NewEvent(StepStarted(step="a", step_index=0), event_id=same),
        NewEvent(StepStarted(step="b", step_index=1), event_id=uuid.UUID(str(same))),
    ]
    with pytest.raises(InvalidEventError, match="repeats id"):
        store._prepare(batch)
