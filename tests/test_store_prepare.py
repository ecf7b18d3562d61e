"""The batch preparation every append runs (steplog.store._prepare): column by column, with a
second walk only to name the first event that fails a check, in batch order."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steplog.errors import InvalidEventError, PayloadTooLargeError
from steplog.events import StepCompleted, StepStarted, catalogue
from steplog.store import (
    NewEvent,
    Prepared,
    RoundRows,
    batch_rows,
    prepare,
    prepare_batch,
    sqlite_datetime,
    sqlite_rows,
    utc,
)

LIMIT = 2_000


def step(i: int, text: str = "") -> StepStarted:
    return StepStarted(step=f"s{i}{text}", step_index=i)


def test_columns_match_the_events_and_their_records() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    news = [NewEvent(step(0)), NewEvent(step(1), recorded_at=at)]
    batch = prepare_batch([*news, step(2)], catalogue, LIMIT)
    assert len(batch) == 3
    assert batch.ids[:2] == [news[0].event_id, news[1].event_id]
    assert batch.hexes == [event_id.hex for event_id in batch.ids]
    assert list(batch.types) == ["StepStarted"] * 3
    assert list(batch.versions) == [StepStarted.schema_version] * 3
    assert batch.payloads[0] == step(0).model_dump_json()
    assert batch.times == [None, at, None]
    items = batch.items()
    assert all(type(item) is Prepared for item in items)
    assert items[:2] == prepare(news, catalogue, LIMIT)
    version = StepStarted.schema_version
    assert items[1] == (news[1].event_id, "StepStarted", version, step(1).model_dump_json(), at)
    part = batch.part(1, 3)
    assert part.ids == batch.ids[1:] and part.payloads == batch.payloads[1:]


def test_rows_from_columns_equal_rows_from_records() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    batch = prepare_batch([NewEvent(step(0)), NewEvent(step(1), recorded_at=at)], catalogue, LIMIT)
    rows = batch_rows("run", 5, 40, batch, "NOW")
    assert rows == sqlite_rows("run", 5, 40, batch.items(), "NOW")
    assert [row[0] for row in rows] == [40, 41] and [row[3] for row in rows] == [5, 6]
    assert [row[6] for row in rows] == ["NOW", "2026-01-02 03:04:05.678901"]
    assert prepare_batch([], catalogue, LIMIT).ids == [] and sqlite_rows("r", 0, 1, [], "") == []


def test_the_first_failing_event_is_named_in_batch_order() -> None:
    big = StepCompleted(step="s", step_index=1, output={"text": "x" * 5_000})
    nul = step(3, "a\u0000b")
    with pytest.raises(PayloadTooLargeError, match=r"event #1 \(StepCompleted"):
        prepare_batch([step(0), big, nul], catalogue, LIMIT)
    with pytest.raises(InvalidEventError, match=r"event #1 \(StepStarted\) contains a NUL"):
        prepare_batch([step(0), nul, big], catalogue, LIMIT)


def test_near_the_limit_and_a_literal_backslash_u0000_pass() -> None:
    near = StepCompleted(step="s", step_index=1, output={"text": "é" * 900})  # > LIMIT // 4
    literal = step(2, "\\u0000 as text")
    batch = prepare_batch([near, literal], catalogue, LIMIT)
    assert len(batch.payloads[0].encode()) <= LIMIT
    assert "\\\\u0000" in batch.payloads[1]


def test_unknown_classes_and_repeated_ids_name_their_event() -> None:
    with pytest.raises(InvalidEventError, match=r"event #1 is a str, not a steplog Event"):
        prepare_batch([step(0), "nope", 42], catalogue, LIMIT)  # type: ignore[list-item]
    same = uuid.uuid4()
    with pytest.raises(InvalidEventError, match=rf"event #2 \(StepStarted\) repeats id {same}"):
        prepare_batch(
            [NewEvent(step(0), same), NewEvent(step(1)), NewEvent(step(2), same)],
            catalogue,
            LIMIT,
        )


def _isoformat_sqlite_datetime(moment: datetime) -> str:
    """``sqlite_datetime`` as it was written before issue 38 (the C ``isoformat``)."""
    return utc(moment).isoformat(" ", "microseconds")[:26]


ZONES = st.one_of(
    st.none(),
    st.just(UTC),
    st.timezones(),
    st.integers(-23 * 60, 23 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes))),
)


@settings(max_examples=600, deadline=None)
@given(
    moment=st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=ZONES
    ),
    whole_second=st.booleans(),
)
def test_sqlite_datetime_writes_what_isoformat_wrote(moment: datetime, whole_second: bool) -> None:
    """The fast formatting gives the text of the ``isoformat`` it replaced, for any time: naive
    (taken as UTC), UTC, any other zone (converted), microsecond 0 included (still written)."""
    if whole_second:
        moment = moment.replace(microsecond=0)
    assert sqlite_datetime(moment) == _isoformat_sqlite_datetime(moment)
    before = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    assert utc(moment) == before and utc(moment).tzinfo is UTC  # utc()'s shortcut: the same


@pytest.mark.parametrize(
    "moment",
    [
        datetime(1, 1, 2, tzinfo=UTC),
        datetime(999, 12, 31, 23, 59, 59, 999_999),
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 30, 0, 5, tzinfo=ZoneInfo("Europe/Lisbon")),
        datetime(2026, 7, 1, 0, 0, 0, 1, tzinfo=timezone(timedelta(hours=-9, minutes=-30))),
    ],
)
def test_sqlite_datetime_edges(moment: datetime) -> None:
    assert sqlite_datetime(moment) == _isoformat_sqlite_datetime(moment)
    assert len(sqlite_datetime(moment)) == 26


def test_round_rows_are_the_rows_of_each_batch() -> None:
    """An assembly round's columns (:class:`RoundRows`) give, from any position, the rows the
    per-batch formats give: SQLite's (:func:`batch_rows`) and the ``COPY`` columns (PostgreSQL's
    ids and payloads in their binary forms)."""
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    now = datetime(2026, 5, 6, 7, 8, 9, 10, tzinfo=UTC)
    first = prepare_batch([NewEvent(step(0)), NewEvent(step(1), recorded_at=at)], catalogue, LIMIT)
    second = prepare_batch([NewEvent(step(2), recorded_at=now)], catalogue, LIMIT)
    sqlite = RoundRows(sqlite=True)
    sqlite.add("a", 0, first, now)
    later = RoundRows(sqlite=True)
    later.add("b", 7, second, now)
    sqlite.extend(later)
    now_text = sqlite_datetime(now)
    want = batch_rows("a", 0, 40, first, now_text) + batch_rows("b", 7, 42, second, now_text)
    assert list(sqlite.rows(40)) == want and len(sqlite) == 3
    assert want[1][6] == "2026-01-02 01:04:05.000000"
    pg = RoundRows(sqlite=False)
    pg.add("a", 0, first, now)
    pg.add("b", 7, second, now)

    def jsonb(payload: str) -> bytes:  # jsonb's binary form: version 1, then the JSON text
        return b"\x01" + payload.encode()

    assert list(pg.rows(1)) == [
        (
            1,
            first.ids[0].bytes,  # the uuid's binary form (sent as bytea)
            "a",
            0,
            "StepStarted",
            StepStarted.schema_version,
            now,
            jsonb(first.payloads[0]),
        ),
        (
            2,
            first.ids[1].bytes,
            "a",
            1,
            "StepStarted",
            StepStarted.schema_version,
            at,
            jsonb(first.payloads[1]),
        ),
        (
            3,
            second.ids[0].bytes,
            "b",
            7,
            "StepStarted",
            StepStarted.schema_version,
            now,
            jsonb(second.payloads[0]),
        ),
    ]
    assert list(pg.rows(1))[1][6].tzinfo is UTC


@settings(max_examples=200, deadline=None)
@given(
    picks=st.lists(st.integers(0, 7), min_size=1, max_size=12),
    moments=st.lists(
        st.datetimes(
            min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=ZONES
        ),
        min_size=8,
        max_size=8,
    ),
    folds=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_round_rows_times_are_each_events_own(
    picks: list[int], moments: list[datetime], folds: list[bool]
) -> None:
    """The times a SQLite round queues (each UTC time formatted once per batch) are each
    event's own text: repeated times, no time (``now``), naive, zoned, either side of a fold."""
    given: list[datetime | None] = [
        m.replace(fold=int(f)) for m, f in zip(moments, folds, strict=True)
    ]
    given[0] = None
    given[1] = moments[2].replace(tzinfo=UTC)  # the wall clock of another pick, in UTC
    times = [given[i] for i in picks]
    now = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)
    news = [NewEvent(step(i), recorded_at=at) for i, at in enumerate(times)]
    rows = RoundRows(sqlite=True)
    rows.add("r", 0, prepare_batch(news, catalogue, LIMIT), now)
    want = [_isoformat_sqlite_datetime(now if at is None else at) for at in times]
    assert [row[6] for row in rows.rows(1)] == want
