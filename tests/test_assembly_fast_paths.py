"""Assembly's cheaper paths of issue 38's second round give exactly what the paths they replaced
gave (the replaced code kept here as the reference), over generated input:

* a staged span built slot by slot (``Span.from_compact``) equals the dataclass's constructor;
* a trace's events made in one loop (``stable_new_events``) are those the mapper made one by
  one: ``stable_event_ids``' ids, each time converted by ``datetime.fromtimestamp``;
* a PostgreSQL round's payloads, held in jsonb's binary form and sent as ``bytea``, are the bytes
  psycopg's jsonb dumper sent, and its event ids, held as 16 bytes, those its uuid dumper sent;
* a round's events prepared as one batch and queued run by run (``premap``, ``RoundMap.queue``)
  are the rows of one ``prepare_batch`` and one ``RoundRows.add`` per trace, in any order the
  transaction stores them, also when an event is refused (each trace alone then).
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from psycopg.dbapi20 import BinaryBinaryDumper
from psycopg.types.json import JsonbBinaryDumper
from psycopg.types.string import BytesBinaryDumper
from psycopg.types.uuid import UUIDBinaryDumper

from steplog.errors import SteplogError
from steplog.events import StepStarted, catalogue
from steplog.ingest.ids import stable_event_ids, stable_new_events
from steplog.ingest.otlp import premap as premap_module
from steplog.ingest.otlp.genai import MappedRun
from steplog.ingest.otlp.premap import premap
from steplog.ingest.otlp.span_model import Span, SpanEvent
from steplog.store import NewEvent, PreparedBatch, RoundRows, prepare_batch

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
LIMIT = 2_000

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)
_attrs = st.dictionaries(st.text(max_size=4), _json, max_size=3)


@settings(max_examples=200, deadline=None)
@given(
    fields=st.tuples(
        st.text(max_size=32),
        st.text(max_size=16),
        st.none() | st.text(max_size=16),
        st.text(max_size=8),
        st.integers(0, 5),
        st.integers(0, 2**64),
        st.integers(0, 2**64),
        _attrs,
        st.integers(0, 2),
        st.text(max_size=8),
        st.lists(st.tuples(st.text(max_size=6), st.integers(0, 2**64), _attrs), max_size=3),
        _attrs,
        st.text(max_size=6),
    )
)
def test_span_from_compact_is_the_constructors_span(fields: tuple[Any, ...]) -> None:
    row = [*fields[:10], [list(event) for event in fields[10]], *fields[11:]]
    made = Span.from_compact(row)
    events = tuple(SpanEvent(name, time_ns, attrs) for name, time_ns, attrs in fields[10])
    want = Span(*fields[:10], events, *fields[11:])  # type: ignore[arg-type]
    assert made == want and type(made) is Span
    assert Span.from_compact(want.to_compact()) == want  # the staging round trip


def test_span_slots_are_its_fields_in_order() -> None:
    """``from_compact`` sets the slots in the order of the compact form: the dataclass's."""
    import dataclasses

    assert list(Span.__slots__) == [f.name for f in dataclasses.fields(Span)]


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.text(max_size=40),
    keys=st.lists(
        st.tuples(
            st.integers(-(2**60), 2**63 - 1) | st.integers(0, 10**18),
            st.text(max_size=20),
            st.text(min_size=1, max_size=4),
        ),
        max_size=8,
    ),
)
def test_events_made_in_one_loop_are_the_ones_made_one_by_one(
    prefix: str, keys: list[tuple[int, str, str]]
) -> None:
    events = [StepStarted(step=name, step_index=i) for i, (_, _, name) in enumerate(keys)]
    stamps = [ns for ns, _, _ in keys]
    made = stable_new_events(prefix, events, stamps, [rest for _, rest, _ in keys])
    of = stable_event_ids(prefix)  # the mapper's way before: one call per event
    want = [
        NewEvent(event, of(ns // 1_000_000, rest), datetime.fromtimestamp(ns / 1e9, UTC))
        for event, (ns, rest, _) in zip(events, keys, strict=True)
    ]
    assert made == want and all(type(one) is NewEvent for one in made)
    assert all(a.event is b.event for a, b in zip(made, want, strict=True))


def _jsonb_as_psycopg_dumped(payload: str) -> bytes:
    """What the events' ``COPY`` sent before: psycopg's jsonb binary dumper of the JSON text,
    with the cursor's JSON ``dumps`` set to pass text as it is (``copy_rows``)."""
    dumper = JsonbBinaryDumper(str)
    dumper.dumps = lambda obj: obj
    return bytes(dumper.dump(payload))  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(
        st.text(
            st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=30
        ),
        min_size=1,
        max_size=4,
    )
)
def test_postgresql_round_payloads_are_the_bytes_psycopg_sent(texts: list[str]) -> None:
    events = [NewEvent(StepStarted(step=text or "s", step_index=i)) for i, text in enumerate(texts)]
    batch = prepare_batch(events, catalogue, 100_000)
    rows = RoundRows(sqlite=False)
    rows.add("run", 0, batch, NOW)
    bytea = BytesBinaryDumper(bytes)
    sent = [bytes(bytea.dump(payload)) for payload in rows.payloads]  # type: ignore[arg-type]
    assert sent == [_jsonb_as_psycopg_dumped(payload) for payload in batch.payloads]


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.uuids(), min_size=1, max_size=4), blobs=st.lists(st.binary(max_size=40)))
def test_postgresql_round_ids_and_bytes_are_what_psycopg_sent(
    ids: list[uuid.UUID], blobs: list[bytes]
) -> None:
    """Issue 38, third round: a PostgreSQL round's event ids are queued as the uuid's 16 bytes
    and sent by the compiled ``bytea`` dumper (``copy_rows`` registers it for ``bytes``): the
    bytes psycopg's uuid dumper sent for the ``UUID`` objects queued before, and those its
    ``Binary`` dumper (the one it picks for ``bytea``) sends for any bytes."""
    events = [NewEvent(StepStarted(step="s", step_index=i), event_id=e) for i, e in enumerate(ids)]
    batch = prepare_batch(events, catalogue, 100_000)
    rows = RoundRows(sqlite=False)
    rows.add("run", 0, batch, NOW)
    bytea = BytesBinaryDumper(bytes)
    sent = [bytes(bytea.dump(event_id)) for event_id in rows.ids]
    assert sent == [bytes(UUIDBinaryDumper(uuid.UUID).dump(e)) for e in ids]  # type: ignore[arg-type]
    assert [bytes(bytea.dump(blob)) for blob in blobs] == [
        bytes(BinaryBinaryDumper(bytes).dump(blob)) for blob in blobs
    ]


# --- a round's events as one batch ----------------------------------------------------------


class _Store:
    """The store's ``_prepare_batch``, without a database."""

    def _prepare_batch(self, events: list[NewEvent]) -> PreparedBatch:
        return prepare_batch(events, catalogue, LIMIT)


_time = st.none() | st.sampled_from(
    [
        datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2))),
        datetime(2026, 6, 1, 0, 0, 0, 1),
    ]
)
_event = st.tuples(st.text(max_size=6), st.booleans(), _time)
"""A step's name, whether it is too large to store, and its time."""


def _runs(traces: list[list[tuple[str, bool, datetime | None]]]) -> dict[str, MappedRun]:
    runs = {}
    for n, events in enumerate(traces):
        trace_id = f"{n:032x}"
        news = [
            NewEvent(
                StepStarted(step=("x" * LIMIT if big else name) or "s", step_index=i),
                recorded_at=at,
            )
            for i, (name, big, at) in enumerate(events)
        ]
        runs[trace_id] = MappedRun(f"otel-{trace_id}", trace_id, news, frozenset())
    return runs


@settings(max_examples=150, deadline=None)
@given(
    traces=st.lists(st.lists(_event, max_size=4), min_size=1, max_size=5),
    order=st.randoms(use_true_random=False),
    sqlite=st.booleans(),
    start=st.integers(0, 3),
)
@example(  # a refused event (too large): each trace prepared alone, the refused one left out
    traces=[[("a", False, None)], [("b", True, None), ("c", False, None)], [("d", False, NOW)]],
    order=random.Random(1),
    sqlite=True,
    start=0,
)
def test_a_round_prepared_at_once_queues_the_rows_of_one_batch_per_trace(
    traces: list[list[tuple[str, bool, datetime | None]]],
    order: Any,
    sqlite: bool,
    start: int,
) -> None:
    """Whatever traces the transaction stores and in whatever order, interleaved with other
    runs' events, the rows are those the per-trace code queued, position for position."""
    runs = _runs(traces)
    real_map = premap_module.map_trace
    premap_module.map_trace = lambda spans: runs[spans[0]]  # type: ignore[assignment,index]
    try:
        spans = {trace_id: [trace_id] for trace_id in runs}
        mapped = premap(_Store(), spans, {t: ["{}"] for t in runs}, NOW)  # type: ignore[arg-type]
    finally:
        premap_module.map_trace = real_map
    # the reference: each trace prepared alone, refused ones left out
    alone: dict[str, PreparedBatch] = {}
    for trace_id, run in runs.items():
        try:
            alone[trace_id] = prepare_batch(run.events, catalogue, LIMIT)
        except SteplogError:
            continue
    assert list(mapped.traces) == list(alone)
    stored = [t for t in alone if order.random() < 0.8]
    order.shuffle(stored)
    other = prepare_batch([NewEvent(StepStarted(step="late", step_index=0))], catalogue, LIMIT)
    want, got = RoundRows(sqlite), RoundRows(sqlite)
    ready: list[Any] = []
    for n, trace_id in enumerate(stored):
        want.add(f"otel-{trace_id}", 0, alone[trace_id], NOW)
        ready.append(mapped.traces[trace_id])
        assert mapped.traces[trace_id].count == len(alone[trace_id])
        if n % 3 == start % 3:  # another run's events between these: queued in order
            want.add("revised", 7, other, NOW)
            mapped.queue(got, ready)
            ready = []
            got.add("revised", 7, other, NOW)
    mapped.queue(got, ready)
    assert list(got.rows(start + 1)) == list(want.rows(start + 1))
