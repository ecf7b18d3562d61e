"""The batch as the event store writes it: its run id checked (:func:`check_run_id`), its events
validated and serialized (column by column, :class:`PreparedBatch`), and the SQLite driver rows
zipped from it.

Every appended event passes through :func:`prepare_batch`, so it is written for per-event cost:
C-level ``map``/``zip`` over the batch's columns, one comprehension for the serializer calls,
and a second walk, event by event, only for a batch that fails a check.
"""

from __future__ import annotations

import operator
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import repeat
from typing import TYPE_CHECKING, Any, Final, NamedTuple, cast

from uuid6 import uuid7

from ..errors import InvalidEventError, PayloadTooLargeError

if TYPE_CHECKING:
    from ..events import Catalogue, Event

_tuple_new = tuple.__new__
_contains = operator.contains
_event_of = operator.attrgetter("event")
_id_of = operator.attrgetter("event_id")
_at_of = operator.attrgetter("recorded_at")
_name_of = operator.itemgetter(0)
_version_of = operator.itemgetter(2)

MAX_RUN_ID_LENGTH: Final = 255
_NUL_ESCAPE: Final = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
"""A JSON escape of NUL (not a literal backslash followed by ``u0000``)."""


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended, with the client-generated id that makes re-sends safe."""

    event: Event
    event_id: uuid.UUID = field(default_factory=uuid7)
    recorded_at: datetime | None = None
    """When it happened; defaults to the time of the append (imports keep the original)."""

    @classmethod
    def of(cls, event: Event, event_id: uuid.UUID) -> NewEvent:
        """``NewEvent(event, event_id)``, built for hot paths (a recorder buffers every event
        through it): the slots are set directly, not through the frozen class's checks."""
        new = object.__new__(cls)
        _SET_EVENT(new, event)
        _SET_ID(new, event_id)
        _SET_AT(new, None)
        return new


_SET_EVENT = NewEvent.__dict__["event"].__set__
_SET_ID = NewEvent.__dict__["event_id"].__set__
_SET_AT = NewEvent.__dict__["recorded_at"].__set__


class Prepared(NamedTuple):
    """An event validated and serialized, ready for the driver (a tuple: built per event)."""

    event_id: uuid.UUID
    type: str
    schema_version: int
    payload_json: str
    recorded_at: datetime | None


Kind = tuple[str, Callable[[Any], bytes], int]
"""An event class's stored type name, its serializer (``to_json``) and its schema version."""


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A batch validated and serialized, column by column (the form appends write from: a
    driver row is zipped from these lists in C, no per-event record in between)."""

    ids: list[uuid.UUID]
    hexes: list[str]
    """The ids as SQLite stores them (32 lowercase hex digits)."""
    kinds: list[Kind]
    payloads: list[str]
    times: list[datetime | None]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def types(self) -> Iterator[str]:
        """Each event's stored type name."""
        return map(_name_of, self.kinds)

    @property
    def versions(self) -> Iterator[int]:
        """Each event's schema version."""
        return map(_version_of, self.kinds)

    def items(self) -> list[Prepared]:
        """One :class:`Prepared` per event (for the re-send check and the other writers)."""
        columns = zip(self.ids, self.types, self.versions, self.payloads, self.times, strict=True)
        # tuple.__new__ through map: a NamedTuple's own __new__ is a Python function.
        return list(map(_tuple_new, repeat(Prepared), columns))

    def part(self, start: int, stop: int) -> PreparedBatch:
        """Events ``start`` to ``stop`` (a chunk of a huge batch)."""
        return PreparedBatch(
            self.ids[start:stop],
            self.hexes[start:stop],
            self.kinds[start:stop],
            self.payloads[start:stop],
            self.times[start:stop],
        )


def prepare(events: Sequence[Event | NewEvent], catalogue: Catalogue, limit: int) -> list[Prepared]:
    """Validate, serialize and size-check a batch (:func:`prepare_batch`), one record each."""
    return prepare_batch(events, catalogue, limit).items()


def prepare_batch(
    events: Sequence[Event | NewEvent], catalogue: Catalogue, limit: int
) -> PreparedBatch:
    """Validate, serialize and size-check a batch before touching the database.

    This runs for every appended event, so the batch is handled column by column, each column
    built by a C-level ``map`` or one comprehension: events are pydantic models validated when
    they were built; what is left to check is that their class is the catalogue's, their ids
    are unique within the batch, and their size. Only a batch that fails a check is walked
    again, event by event, to name the culprit (:func:`_reject`).
    """
    news = [item if type(item) is NewEvent else _new_event(item) for item in events]
    if not news:
        return PreparedBatch([], [], [], [], [])
    models = list(map(_event_of, news))
    kinds: dict[type[Event], Kind] = {}
    for kind in cast("set[type[Event]]", set(map(type, models))):
        type_name = catalogue.name_of(kind)
        if type_name is not None:
            # The model's own serializer, as ``model_dump_json()`` calls it (same bytes),
            # without that method's keyword handling: this is the per-event cost of appending.
            kinds[kind] = (type_name, kind.__pydantic_serializer__.to_json, kind.schema_version)
    try:
        known = list(map(kinds.__getitem__, map(type, models)))
    except KeyError:
        index = next(i for i, event in enumerate(models) if type(event) not in kinds)
        raise not_in_catalogue(catalogue, index, models[index]) from None
    try:
        payloads = [
            to_json(event).decode() for (_, to_json, _), event in zip(known, models, strict=True)
        ]
    except (ValueError, UnicodeError) as exc:
        raise _reject(news, known, None, limit) or InvalidEventError(str(exc)) from None
    # A str of n characters encodes to at most 4n bytes: count exactly only near the limit.
    if max(map(len, payloads)) > limit // 4 or any(map(_contains, payloads, repeat("\\u0000"))):
        problem = _reject(news, known, payloads, limit)
        if problem is not None:
            raise problem
    ids = list(map(_id_of, news))
    hexes = [f"{event_id.int:032x}" for event_id in ids]  # UUID.hex, without the property call
    if len(hexes) > 1 and len(set(hexes)) != len(hexes):
        seen: set[str] = set()
        for position, hex_id in enumerate(hexes):
            if hex_id in seen:
                raise InvalidEventError(
                    f"event #{position} ({known[position][0]}) repeats id {ids[position]}"
                )
            seen.add(hex_id)
    return PreparedBatch(ids, hexes, known, payloads, list(map(_at_of, news)))


def _reject(
    news: list[NewEvent],
    known: list[Kind],
    payloads: list[str] | None,
    limit: int,
) -> InvalidEventError | None:
    """The first event of a batch that cannot be stored, as the error to raise, checked in
    order (``payloads``, if given, are the events' JSON); ``None`` if every event passes (a
    payload near the size limit that fits, a literal backslash before ``u0000``)."""
    for index, (new, (type_name, to_json, _)) in enumerate(zip(news, known, strict=True)):
        try:
            payload_json = to_json(new.event).decode() if payloads is None else payloads[index]
        except (ValueError, UnicodeError) as exc:
            return InvalidEventError(
                f"event #{index} ({type_name}) cannot be stored as JSON: {exc}"
            )
        if "\\u0000" in payload_json and _NUL_ESCAPE.search(payload_json):
            return InvalidEventError(
                f"event #{index} ({type_name}) contains a NUL character (\\u0000), which "
                "PostgreSQL cannot store; remove or escape it"
            )
        if len(payload_json) > limit // 4 and len(payload_json.encode()) > limit:
            return PayloadTooLargeError(
                f"event #{index} ({type_name}, id {new.event_id}) has a "
                f"{len(payload_json.encode()):,}-byte payload; the limit is {limit:,} bytes"
            )
    return None


def _new_event(item: Event | NewEvent) -> NewEvent:
    return item if isinstance(item, NewEvent) else NewEvent(item)


def not_in_catalogue(catalogue: Catalogue, index: int, event: object) -> InvalidEventError:
    from ..events import Event

    if not isinstance(event, Event):
        return InvalidEventError(f"event #{index} is a {type(event).__name__}, not a steplog Event")
    name = event.type_name()
    if name in catalogue:
        return InvalidEventError(f"event #{index}: {name} is not the catalogue's {name} model")
    return InvalidEventError(
        f"event #{index}: unknown event type {name!r}; register it in the catalogue"
    )


def check_run_id(run_id: object) -> None:
    """A run id is a non-empty string of at most 255 characters without control characters."""
    if not isinstance(run_id, str) or not run_id.strip():
        raise InvalidEventError(f"run id must be a non-empty string, not {run_id!r}")
    if len(run_id) > MAX_RUN_ID_LENGTH:
        raise InvalidEventError(
            f"run id {run_id[:40]!r}... is {len(run_id)} characters; the limit is "
            f"{MAX_RUN_ID_LENGTH}"
        )
    if run_id.isprintable():  # no control characters, no lone surrogates: every append's case
        return
    if any(ord(ch) < 32 for ch in run_id):
        raise InvalidEventError(f"run id {run_id!r} contains control characters")
    try:
        run_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidEventError(f"run id {run_id!r} is not valid Unicode text") from None


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive time is taken to be UTC already (never local time)."""
    tzinfo = moment.tzinfo
    if tzinfo is UTC:  # every event's time: no conversion (``astimezone`` is a method call)
        return moment
    return moment.replace(tzinfo=UTC) if tzinfo is None else moment.astimezone(UTC)


_JSONB_VERSION: Final = b"\x01"
"""The first byte of jsonb's binary form (its version), before the JSON text in UTF-8."""

_TWO_DIGITS: Final = tuple(f"{n:02d}" for n in range(100))


def sqlite_datetime(moment: datetime, _two: tuple[str, ...] = _TWO_DIGITS) -> str:
    """UTC, in the text format SQLAlchemy's SQLite ``DateTime`` reads back
    (``YYYY-MM-DD HH:MM:SS.ffffff``, microseconds always written): this runs for every event.

    The same text as ``utc(moment).isoformat(" ", "microseconds")[:26]``, for about 60% of its
    instructions: a time already in UTC (every event's) is not converted again, and the fields
    come from a table of two-digit strings, not the C ``isoformat``'s generic formatting (nor
    ``%``-formatting's, which costs more than this too)."""
    if moment.tzinfo is not UTC:
        moment = utc(moment)
    return (
        f"{moment.year:04d}-{_two[moment.month]}-{_two[moment.day]} {_two[moment.hour]}:"
        f"{_two[moment.minute]}:{_two[moment.second]}.{str(moment.microsecond + 1_000_000)[1:]}"
    )


def sqlite_rows(
    run_id: str, seq: int, position: int, batch: Sequence[Prepared], now_text: str
) -> list[tuple[Any, ...]]:
    """``batch``'s rows for :data:`SQLITE_INSERT`, from ``seq`` at ``position`` (``now_text``
    where an event has no recorded time): the SQLite row format (see :func:`batch_rows`)."""
    if not batch:
        return []
    ids, types, versions, payloads, times = zip(*batch, strict=True)
    hexes = [f"{event_id.int:032x}" for event_id in ids]
    return _rows(run_id, seq, position, hexes, types, versions, payloads, times, now_text)


def batch_rows(
    run_id: str, seq: int, position: int, batch: PreparedBatch, now_text: str
) -> list[tuple[Any, ...]]:
    """:func:`sqlite_rows` of a :class:`PreparedBatch`, zipped from its columns."""
    return _rows(
        run_id,
        seq,
        position,
        batch.hexes,
        batch.types,
        batch.versions,
        batch.payloads,
        batch.times,
        now_text,
    )


def _rows(
    run_id: str,
    seq: int,
    position: int,
    hexes: Sequence[str],
    types: Iterable[str],
    versions: Iterable[int],
    payloads: Iterable[str],
    times: Sequence[datetime | None],
    now_text: str,
) -> list[tuple[Any, ...]]:
    """The one place the SQLite row format is written: built column by column and zipped in
    C (only a recorded time, when an event has one, is formatted per event)."""
    count = len(hexes)
    at_texts: Iterable[str] = (
        repeat(now_text)
        if times.count(None) == count
        else [now_text if at is None else sqlite_datetime(at) for at in times]
    )
    return list(
        zip(
            range(position, position + count),
            hexes,
            repeat(run_id),
            range(seq, seq + count),
            types,
            versions,
            at_texts,
            payloads,
        )
    )


class RoundRows:
    """Events of several runs queued for one insert (an assembly round's), kept column by
    column: a driver row is zipped from the columns in C only when the first position is known
    (under the position lock), with no per-event record built on the way (:meth:`rows`).

    The columns are those of :data:`~._sqlite_write.SQLITE_INSERT` after the position, as that
    statement takes them on SQLite (ids as hex, times as text: :func:`sqlite_rows`' format) or
    as the binary ``COPY`` of the events table takes them on PostgreSQL (the id's 16 bytes and
    the payload in jsonb's binary form, both ``bytes`` to send as ``bytea``, which the driver
    passes through as they are; an aware ``datetime``). An event without a recorded time gets
    the ``now`` of the :meth:`add` that queued it.
    """

    __slots__ = (
        "_now",
        "_stamp",
        "ids",
        "payloads",
        "run_ids",
        "seqs",
        "sqlite",
        "times",
        "types",
        "versions",
    )

    def __init__(self, sqlite: bool) -> None:
        self.sqlite = sqlite
        self._now: datetime | None = None
        self._stamp: Any = None
        self.ids: list[Any] = []
        self.run_ids: list[str] = []
        self.seqs: list[int] = []
        self.types: list[str] = []
        self.versions: list[int] = []
        self.times: list[Any] = []
        self.payloads: list[Any] = []

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, run_id: str, seq: int, batch: PreparedBatch, now: datetime) -> None:
        """Queue ``batch`` for run ``run_id`` from ``seq`` on."""
        count = len(batch)
        self.run_ids += repeat(run_id, count)
        self.seqs += range(seq, seq + count)
        self._add_events(batch, now)

    def add_runs(
        self, runs: Sequence[tuple[str, int]], batch: PreparedBatch, now: datetime
    ) -> None:
        """Queue ``batch``, the events of several new runs one after the other: ``runs`` gives
        each run's id and how many of them are its own (from seq 0). The same columns as one
        :meth:`add` per run, for the cost of one."""
        if sum(count for _, count in runs) != len(batch):
            raise ValueError("the runs' event counts do not add up to the batch")
        run_ids, seqs = self.run_ids, self.seqs
        for run_id, count in runs:
            run_ids += repeat(run_id, count)
            seqs += range(count)
        self._add_events(batch, now)

    def _add_events(self, batch: PreparedBatch, now: datetime) -> None:
        """The columns of ``batch`` other than the run and seq (queued by the caller)."""
        sqlite = self.sqlite
        # PostgreSQL: the uuid's 16 bytes, its binary form (sent as ``bytea`` by psycopg's C
        # dumper; its ``UUID`` dumper is a Python method per row)
        self.ids += batch.hexes if sqlite else map(bytes.fromhex, batch.hexes)
        self.types += batch.types
        self.versions += batch.versions
        stamp = self._stamp if self._now is now else self._stamp_of(now)
        if not sqlite:
            # jsonb's binary form, made here in one comprehension rather than by the driver's
            # Python dumper (three calls a row): its version byte, then the JSON text as is
            self.payloads += [_JSONB_VERSION + payload.encode() for payload in batch.payloads]
            self.times += [
                stamp if at is None else at if at.tzinfo is UTC else utc(at) for at in batch.times
            ]
            return
        self.payloads += batch.payloads
        # A run's events share their times (a span's end ends a call and its step): each UTC
        # time is formatted once per batch. Only UTC ones are looked up: times of one other
        # zone compare equal across a DST fold (by their wall clocks), their texts do not.
        texts: dict[datetime, str] = {}
        column = self.times
        for at in batch.times:
            if at is None:
                column.append(stamp)
            elif at.tzinfo is UTC:
                text = texts.get(at)
                if text is None:
                    text = texts[at] = sqlite_datetime(at)
                column.append(text)
            else:
                column.append(sqlite_datetime(at))

    def _stamp_of(self, now: datetime) -> Any:
        """``now`` as the time column holds it (kept: a round queues many runs at one ``now``)."""
        self._now = now
        self._stamp = sqlite_datetime(now) if self.sqlite else now
        return self._stamp

    def extend(self, other: RoundRows) -> None:
        """Queue ``other``'s events after these."""
        self.ids += other.ids
        self.run_ids += other.run_ids
        self.seqs += other.seqs
        self.types += other.types
        self.versions += other.versions
        self.times += other.times
        self.payloads += other.payloads

    def rows(self, position: int) -> Iterator[tuple[Any, ...]]:
        """The driver rows, from ``position`` on: ``(position, id, run id, seq, type, schema
        version, recorded at, payload)``, each zipped in C from the columns."""
        return zip(
            range(position, position + len(self.ids)),
            self.ids,
            self.run_ids,
            self.seqs,
            self.types,
            self.versions,
            self.times,
            self.payloads,
            strict=True,
        )
