"""The buffered, durable writer of one run's events, and its recorded random stream."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from ..canonical import jsonable
from ..errors import InvalidEventError
from ..events import Event, RandomDrawn, unvalidated
from ..store import EventStore, NewEvent
from .ids import new_ids

R = TypeVar("R")

CALL_EVENTS = frozenset({"ModelCalled", "ToolCalled", "ClockRead", "RandomDrawn"})


class Serves(Protocol):
    """What serves recorded calls back during a replay (harness or SDK playback)."""

    def take(
        self, kind: str, step_index: int | None, *, name: str | None = None, request: Any = None
    ) -> dict[str, Any]: ...


def step_seed(seed: int | None, step_index: int, attempt: int) -> str:
    """Seed material of one step attempt's random stream.

    Each attempt draws from its own stream, so a resumed or forked run sees exactly the draws
    an uninterrupted run would have seen from that step on.
    """
    return f"{seed}:{step_index}:{attempt}"


class RunRecorder:
    """Buffers one run's events and appends them with the run's expected version.

    Thread-safe: calls recorded from several threads of one run are serialized, and a call's
    ``call_index`` is assigned in the same critical section as its place in the buffer, so the
    stream is in call order. With ``sort_calls`` (replays, whose calls reuse the recorded
    indexes) each stretch of consecutive call events is put in ``call_index`` order at flush,
    so concurrent calls answered in another order still give the recorded stream.

    A flush whose append failed keeps its batch, exactly as it was, and the next flush sends
    that batch again before anything recorded since: the failed append may have been committed
    after all (the connection died after COMMIT was sent), and re-sending the identical batch
    is then a no-op, whereas a batch with more events in it would be refused.
    """

    def __init__(
        self,
        store: EventStore,
        run_id: str,
        *,
        version: int = 0,
        call_index: int = 0,
        sort_calls: bool = False,
    ):
        self.store = store
        self._bare = bool(getattr(store, "keeps_events", False))
        """The store takes the events themselves (a check-only replay's buffer: it ids them
        only if they are read back), so none is wrapped in a :class:`NewEvent` with an id."""
        self.run_id = run_id
        self.version = version
        self.call_index = call_index
        self.sort_calls = sort_calls
        self._buffer: list[NewEvent | Event] = []
        self._identified = 0
        """How many of the buffered events have their ids already (:meth:`_identify`)."""
        self._unacknowledged: list[NewEvent | Event] = []
        """A batch whose append raised: stored or not, it is re-sent first, unchanged."""
        self._lock = threading.RLock()

    def record(self, event: Event) -> None:
        """Buffer ``event``; it becomes durable at the next :meth:`flush`."""
        with self._lock:
            self._buffer.append(event)

    def record_fields(self, kind: type[Event], fields: dict[str, Any]) -> Event | None:
        """Buffer ``kind(**fields)`` built without validating again (see
        :func:`~steplog.events.unvalidated`: ``fields`` must name every field, else it is
        validated; the recorder takes the dict), and return it: for the harness's own step and
        call events, whose values it produced itself, and the calls a check-only replay serves.
        (A check-only replay's recorder may keep the recorded event instead: None.)"""
        event = unvalidated(kind, fields)
        self.record(event)
        return event

    def record_validated(self, kind: type[Event], **fields: Any) -> None:
        """Buffer ``kind(**fields)``, validated: for the harness's events whose values it does
        not vouch for as it does for its step and call events (failures, gates, limits). (A
        check-only replay's recorder keeps the recorded event instead when it is this one.)"""
        self.record(kind(**fields))

    def record_call(self, build: Callable[[int], Event], call_index: int | None = None) -> None:
        """Buffer the call event ``build(call_index)``: the next index unless one is given."""
        with self._lock:
            if call_index is None:  # next_call_index(), inline: the lock is held already
                call_index = self.call_index
                self.call_index += 1
            self._buffer.append(build(call_index))

    def next_call_index(self) -> int:
        """The order of the next nondeterministic call within the run."""
        with self._lock:
            index = self.call_index
            self.call_index += 1
            return index

    @property
    def pending(self) -> Sequence[NewEvent]:
        """Events recorded but not yet committed (a check-only buffer's with ids made here:
        it keeps none)."""
        with self._lock:
            self._identify()
            return tuple(
                item if isinstance(item, NewEvent) else NewEvent(item)
                for item in (*self._unacknowledged, *self._buffer)
            )

    def _identify(self) -> None:
        """Give the buffered events that have none their ids, all at once (one clock read and
        one ``os.urandom`` call: :func:`~.ids.new_ids`). An id is fixed from then on: the one
        :attr:`pending` shows is the one stored, and a failed batch is re-sent with its ids.
        Not for a check-only buffer, which takes the events themselves."""
        buffer, start = self._buffer, self._identified
        if self._bare or start == len(buffer):
            return
        of = NewEvent.of
        for index, id_ in enumerate(new_ids(len(buffer) - start), start):
            item = buffer[index]  # an event (a NewEvent only if one was recorded as such)
            buffer[index] = of(item.event if isinstance(item, NewEvent) else item, id_)
        self._identified = len(buffer)

    def flush(self) -> None:
        """Commit the buffered events in one atomic append (a no-op when there are none).

        Events the store refuses (too large, invalid) are dropped with the batch, and the error
        propagates: the run can still record its failure afterwards. When the database fails
        (:class:`~steplog.errors.DatabaseError`, after the store's own retries) the batch is
        kept and sent again by the next flush.
        """
        with self._lock:
            if self._unacknowledged:
                self._send(self._unacknowledged)
            if self._buffer:
                self._identify()
                batch, self._buffer, self._identified = self._buffer, [], 0
                self._send(_in_call_order(batch) if self.sort_calls else batch)

    def _send(self, batch: list[NewEvent | Event]) -> None:
        self._unacknowledged = batch
        try:
            self.store.append(self.run_id, batch, expected_version=self.version)
        except InvalidEventError:
            self._unacknowledged = []  # refused before reaching the database: never stored
            raise
        self.version += len(batch)
        self._unacknowledged = []


def _in_call_order(batch: list[NewEvent | Event]) -> list[NewEvent | Event]:
    """``batch`` with every stretch of consecutive call events sorted by ``call_index``."""
    ordered: list[NewEvent | Event] = []
    stretch: list[NewEvent | Event] = []
    for item in batch:
        if _event(item).type_name() in CALL_EVENTS:
            stretch.append(item)
            continue
        ordered.extend(sorted(stretch, key=_call_index))
        stretch = []
        ordered.append(item)
    ordered.extend(sorted(stretch, key=_call_index))
    return ordered


def _event(item: NewEvent | Event) -> Event:
    return item.event if isinstance(item, NewEvent) else item


def _call_index(item: NewEvent | Event) -> int:
    return int(getattr(_event(item), "call_index", 0))


class RecordedRandom:
    """A seeded random stream whose every draw is recorded as ``RandomDrawn``."""

    def __init__(
        self,
        recorder: RunRecorder,
        seed_material: str,
        step_index: int | None,
        playback: Serves | None = None,
    ):
        self._random = random.Random(seed_material)
        self._recorder = recorder
        self._step_index = step_index
        self._playback = playback

    def _record(self, kind: str, value: Any) -> Any:
        served_index = None
        if self._playback is not None:  # a replay: the recorded draw
            served = self._playback.take("RandomDrawn", self._step_index)
            value, served_index = served["value"], served.get("call_index")
        step_index = self._step_index
        self._recorder.record_call(
            lambda index: RandomDrawn(
                step_index=step_index, call_index=index, kind=kind, value=jsonable(value)
            ),
            served_index,
        )
        return value

    def random(self) -> float:
        """A float in [0, 1)."""
        return float(self._record("random", self._random.random()))

    def uniform(self, low: float, high: float) -> float:
        """A float in [low, high]."""
        return float(self._record("uniform", self._random.uniform(low, high)))

    def randint(self, low: int, high: int) -> int:
        """An int in [low, high]."""
        return int(self._record("randint", self._random.randint(low, high)))

    def choice(self, options: Sequence[R]) -> R:
        """One of ``options``."""
        index = self._random.randrange(len(options))
        served = self._record("choice", index)
        return options[int(served)]

    def uuid(self) -> str:
        """A UUID drawn from the stream (not from the OS), so replays see the same one."""
        return str(
            self._record("uuid", str(uuid.UUID(int=self._random.getrandbits(128), version=4)))
        )
