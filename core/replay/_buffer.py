"""Replays that write nothing (or everything at once): an event store that buffers new runs.

A :class:`BufferedStore` stands in for the real :class:`~steplog.store.EventStore` while a replay
runs: the replay's appends are validated and serialized exactly as the store would (the same
``_prepare``: catalogue, JSON, size limit) but kept in memory, and reading them back gives the
payloads a real read would. Runs it does not hold are read from the real store. A check-only
replay (``steplog replay RUN --check``) throws the buffer away after comparing; a writing exact
replay appends the buffered run in one transaction at the end (:meth:`BufferedStore.commit`).

Where a replay departs from its recording (:func:`departure`, :func:`same_stream`) is told by
:mod:`steplog.replay._departure` (re-exported here).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic_core import from_json
from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError
from uuid6 import uuid7

from ..errors import ConcurrencyError, SteplogError
from ..store import AppendResult, EventStore, NewEvent, StoredEvent, check_run_id, not_in_catalogue
from ._departure import declared_changes, departure, describe_departure, same_stream
from ._diff import REPLAY_LINKS
from ._diff_rules import ANNOTATIONS
from ._recording import read_recording

if TYPE_CHECKING:
    from ..events import Event

__all__ = ["BufferedStore", "declared_changes", "departure", "describe_departure", "same_stream"]


_COUNTED_IDS: list[uuid.UUID] = []
_TYPE = attrgetter("type")
_PAYLOAD = attrgetter("payload")


def _counted_id(index: int) -> uuid.UUID:
    """UUID ``index + 1`` (a check-only replay's id of its event at seq ``index``: nothing
    keeps them), made once per process and shared by every check-only replay."""
    if index >= len(_COUNTED_IDS):
        _COUNTED_IDS.extend(uuid.UUID(int=n + 1) for n in range(len(_COUNTED_IDS), 2 * index + 64))
    return _COUNTED_IDS[index]


class BufferedStore(EventStore):
    """An :class:`EventStore` whose appends stay in memory; other runs are read from ``backing``."""

    keeps_events: bool = False
    """Check-only: appends keep the events themselves (a recorder hands them over bare, with
    no id: :meth:`read_run` numbers them if it is ever asked), or -- an event equal to the
    recording's at its place (:class:`~steplog.harness.check_recorder.CheckRecorder`) -- the
    recorded :class:`StoredEvent` itself."""

    def __init__(self, backing: EventStore, *, check_only: bool = False) -> None:
        super().__init__(
            backing.engine,
            catalogue=backing.catalogue,
            max_payload_bytes=backing.max_payload_bytes,
            retries=backing.retries,
        )
        self.backing = backing
        self.check_only = check_only
        """Nothing will be committed: event ids are a counter, not UUIDv7s."""
        self.keeps_events = check_only
        self._runs: dict[str, list[StoredEvent]] = {}
        self._new: dict[str, list[NewEvent]] = {}
        self._events: dict[str, list[Event | NewEvent]] = {}
        """Check-only: each run's events as recorded, serialized only when read."""
        self.known_types: dict[type, str] = {}
        """Check-only: the catalogue's name of each (bare) event type kept so far."""
        self._accepted: set[type] = {StoredEvent}
        """Check-only: what :meth:`keep` takes without a look: the known types, and recorded
        events kept as they are (a recorder keeps those only for known types)."""
        self._configs: dict[tuple[type, int], tuple[Any, Any]] = {}
        """Check-only: the JSON form of each run config seen, by id (the object kept)."""
        self._opened = datetime.now(UTC)
        """Check-only: the time every buffered event is said to be appended at."""
        self._reader: Connection | None = None
        self._first_replay: uuid.UUID | None = None
        self._replays = 0
        """Check-only, SQLite: the connection :meth:`recording` reads on (kept for a batch)."""

    @property
    def url(self) -> str:
        """The backing store's URL (nothing is written there until :meth:`commit`)."""
        return self.backing.url

    def replay_id(self) -> str:
        """Check-only: a run id for the next replay of a batch: the batch's UUIDv7 counted on
        (nothing keeps a check-only replay's run; one UUIDv7 per replay cost ~1% of a check)."""
        if self._first_replay is None:
            self._first_replay = uuid7()
        self._replays += 1
        digits = f"{self._first_replay.int + self._replays:032x}"  # str(UUID(int=...)), bare
        return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"

    def close(self) -> None:
        """Release the connection :meth:`recording` kept (the engine belongs to the backing
        store)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    def recording(self, run_id: str) -> list[StoredEvent]:
        """Check-only: the backing store's recording of ``run_id`` as a check-only replay reads
        it (:func:`~steplog.replay._recording.read_recording`). On SQLite it is read on one
        connection kept until :meth:`close` (nothing is held open between its statements: each
        read is its own), sparing a batch of checks a connection per run; a failed read there
        drops that connection and reads again as the store reads (a fresh one, retried)."""
        backing = self.backing
        if run_id in self._runs:  # a run this buffer holds (not a recording: never checked)
            return self.read_run(run_id)
        if not backing._sqlite:
            return read_recording(backing, run_id)
        if self._reader is None:
            self._reader = backing.engine.connect()
        try:
            return read_recording(backing, run_id, self._reader)
        except (SQLAlchemyError, sqlite3.Error):  # e.g. the kept connection went bad
            self.close()
            return read_recording(backing, run_id)

    def append(
        self,
        run_id: str,
        events: Sequence[Event | NewEvent],
        expected_version: int | None = None,
    ) -> list[int]:
        """Like :meth:`append_batch`, returning the positions in the run."""
        if self.check_only:
            first = self.keep(run_id, events, expected_version)
            return list(range(first, first + len(events)))
        return self.append_batch(run_id, events, expected_version).positions

    def append_batch(
        self,
        run_id: str,
        events: Sequence[Event | NewEvent],
        expected_version: int | None = None,
    ) -> AppendResult:
        """Validate and serialize ``events`` like the store, and keep them in memory.

        A check-only store keeps the events themselves (with their type names, checked against
        the catalogue): they are serialized only if read (:meth:`read_run`), and compared with a
        recording field by field (:meth:`same_as`); the store's size checks are skipped, as
        nothing will be stored.
        """
        if self.check_only:
            first = self.keep(run_id, events, expected_version)
            return AppendResult(list(range(first, first + len(events))))
        if run_id not in self._runs:
            check_run_id(run_id)
        stored = self._runs.setdefault(run_id, [])
        first = len(stored)
        if expected_version is not None and expected_version != first:
            raise ConcurrencyError(run_id, expected_version, first)
        now = datetime.now(UTC)
        items = [e if isinstance(e, NewEvent) else NewEvent(e) for e in events]
        for offset, prepared in enumerate(self._prepare(items)):
            stored.append(
                StoredEvent(
                    -1,
                    prepared.event_id,
                    run_id,
                    first + offset,
                    prepared.type,
                    prepared.schema_version,
                    prepared.recorded_at or now,
                    from_json(prepared.payload_json),
                )
            )
        self._new.setdefault(run_id, []).extend(items)
        return AppendResult(list(range(first, first + len(items))))

    def append_new_runs(
        self, runs: Sequence[tuple[str, Sequence[Event | NewEvent]]]
    ) -> list[list[int]]:
        """Buffer several new runs."""
        return [self.append_batch(run_id, events, 0).positions for run_id, events in runs]

    def keep(
        self, run_id: str, events: Sequence[Event | NewEvent], expected_version: int | None
    ) -> int:
        """Check-only: buffer ``events`` as they are (each of a catalogued type, or a recorded
        event); the seq of the first (what :meth:`append` does, without its list of seqs)."""
        kept = self._events.get(run_id)
        if kept is None:
            check_run_id(run_id)
            kept = self._events[run_id] = []
            self._runs[run_id] = []
        first = len(kept)
        if expected_version is not None and expected_version != first:
            raise ConcurrencyError(run_id, expected_version, first)
        accepted = self._accepted
        for offset, item in (
            () if all(map(accepted.__contains__, map(type, events))) else enumerate(events)
        ):
            if type(item) not in accepted:
                event = item.event if isinstance(item, NewEvent) else item
                name = self.catalogue.name_of(type(event))
                if name is None:
                    raise not_in_catalogue(self.catalogue, offset, event)
                if event is item:
                    self.known_types[type(item)] = name
                    accepted.add(type(item))
        kept.extend(events)
        return first

    def quarantine(self, *, source: str, location: str, reason: str, raw: str) -> int:
        """A replay never quarantines input."""
        raise SteplogError("a buffered replay cannot quarantine input")

    def read_run(self, run_id: str, *, from_seq: int = 0) -> list[StoredEvent]:
        """The buffered run's events, or the backing store's for any other run."""
        if run_id in self._runs:
            return self._serialized(run_id)[from_seq:]
        return self.backing.read_run(run_id, from_seq=from_seq)

    def _serialized(self, run_id: str) -> list[StoredEvent]:
        """A run's stored events; a check-only run's are serialized here, on first read: each
        event's JSON form (``model_dump(mode="json")``, what a read would give back), without
        the store's size checks (nothing will be stored)."""
        stored = self._runs[run_id]
        kept = self._events.get(run_id, ())
        name_of = self.catalogue.name_of
        for seq in range(len(stored), len(kept)):
            item = kept[seq]
            if isinstance(item, StoredEvent):  # the recording's event, kept as recorded
                stored.append(
                    StoredEvent(
                        -1,
                        _counted_id(seq),
                        run_id,
                        seq,
                        item.type,
                        item.schema_version,
                        self._opened,
                        item.payload,
                    )
                )
                continue
            if isinstance(item, NewEvent):
                event, event_id, at = item.event, item.event_id, item.recorded_at or self._opened
            else:
                event, event_id, at = item, _counted_id(seq), self._opened
            stored.append(
                StoredEvent(
                    -1,
                    event_id,
                    run_id,
                    seq,
                    name_of(type(event)) or "",
                    event.schema_version,
                    at,
                    event.model_dump(mode="json"),
                )
            )
        return stored

    def same_as(self, run_id: str, recorded: list[StoredEvent]) -> bool:
        """Whether the buffered run has ``recorded``'s canonical event stream: what
        :func:`same_stream` says of ``recorded`` and :meth:`read_run`, found without serializing
        each event when its fields already equal the recorded payload (a check-only replay
        that behaves as recorded, the usual case), or when it is the recorded event itself."""
        kept = self._events.get(run_id)
        if kept is None or run_id not in self._runs:
            return same_stream(recorded, self.read_run(run_id))
        if self._same_bare(kept, recorded):
            return True
        name_of = self.catalogue.name_of
        mine: list[tuple[str | None, Any]] = []
        for item in kept:
            if isinstance(item, StoredEvent):  # the recorded event, kept as recorded
                if item.type not in ANNOTATIONS:
                    mine.append((item.type, item.payload))
                continue
            event = item.event if isinstance(item, NewEvent) else item
            type_name = name_of(type(event))
            if type_name not in ANNOTATIONS:
                mine.append((type_name, event))
        theirs = [event for event in recorded if event.type not in ANNOTATIONS]
        if len(mine) != len(theirs):
            return False
        for (type_name, event), stored in zip(mine, theirs, strict=True):
            if type_name != stored.type:
                return False
            payload = stored.payload
            dumped = event if type(event) is dict else None  # a recorded payload, as read
            if type_name == "RunStarted":
                links = REPLAY_LINKS
                if dumped is None:
                    dumped = event.model_dump(mode="json")
                if {k: v for k, v in payload.items() if k not in links} != {
                    k: v for k, v in dumped.items() if k not in links
                }:
                    return False
            elif dumped is not None:
                if payload != dumped:
                    return False
            elif payload != event.__dict__ and payload != event.model_dump(mode="json"):
                # the fields equal: so does their JSON form (the harness's values are JSON
                # values); else the JSON form decides
                return False
        return True

    def _same_bare(self, kept: list[Any], recorded: list[StoredEvent]) -> bool:
        """The usual case of :meth:`same_as`, compared list by list (no loop in Python): the
        run's events, all bare (or recorded ones kept as such), have the recorded types and,
        after the header, the recorded fields (then so do their JSON forms), and its header
        equals the recorded one but for the replay links. False says only "look closer", not
        "different"."""
        if len(kept) != len(recorded):  # annotations added to the recording since
            recorded = [event for event in recorded if event.type not in ANNOTATIONS]
        if not kept or not recorded or type(kept[0]) is StoredEvent:
            return False
        # after the header: every event the recorded one itself (a replay that served and
        # rebuilt the recording exactly; a recorder keeps recorded events only of the types
        # it records, never annotations) ...
        if kept[1:] != recorded[1:]:
            # ... or the same types and fields
            known = self.known_types
            try:
                types = [
                    item.type if type(item) is StoredEvent else known[type(item)] for item in kept
                ]
            except KeyError:  # an event handed over wrapped (a NewEvent): not the usual case
                return False
            if (
                types != list(map(_TYPE, recorded))
                or not ANNOTATIONS.isdisjoint(types)
                or [
                    item.payload if type(item) is StoredEvent else item.__dict__
                    for item in kept[1:]
                ]
                != list(map(_PAYLOAD, recorded[1:]))
            ):
                return False
        header = kept[0]
        if (
            isinstance(header, NewEvent)
            or self.known_types.get(type(header)) != "RunStarted"
            or recorded[0].type != "RunStarted"
        ):
            return False
        links = REPLAY_LINKS
        theirs = {k: v for k, v in recorded[0].payload.items() if k not in links}
        # its fields, the nested config as JSON (dumped once per config: a scenario's is one
        # frozen object): equal fields have equal JSON forms; else the JSON form decides
        fields = header.__dict__
        mine = {k: v for k, v in fields.items() if k not in links}
        if isinstance(fields.get("config"), BaseModel):
            mine["config"] = self._config_json(header)
        if mine == theirs:
            return True
        dumped = header.model_dump(mode="json")
        return theirs == {k: v for k, v in dumped.items() if k not in links}

    def _config_json(self, header: Event) -> Any:
        """The JSON form of ``header``'s (frozen) config, as its own JSON form has it: made once
        per config object and header type."""
        config = header.__dict__["config"]
        key = (type(header), id(config))
        seen = self._configs.get(key)
        if seen is None or seen[0] is not config:
            dumped = header.model_dump(mode="json", include={"config"})["config"]
            seen = self._configs[key] = (config, dumped)
        return seen[1]

    def version(self, run_id: str) -> int:
        """The buffered run's number of events, or the backing store's."""
        if run_id in self._events:
            return len(self._events[run_id])
        if run_id in self._runs:
            return len(self._runs[run_id])
        return self.backing.version(run_id)

    def commit(self, run_id: str) -> list[int]:
        """Append the buffered run to the backing store in one transaction; its positions."""
        if self.check_only:
            raise SteplogError("a check-only replay stores nothing")
        events = self._new.pop(run_id, [])
        self._runs.pop(run_id, None)
        return self.backing.append(run_id, events, expected_version=0)

    def discard(self, run_id: str) -> None:
        """Forget a buffered run."""
        self._new.pop(run_id, None)
        self._runs.pop(run_id, None)
        self._events.pop(run_id, None)
