"""An event as the store reads it back (:class:`StoredEvent`), and how a driver row becomes one.

Readers build one :class:`StoredEvent` per event streamed: the type is a named tuple, its id is
parsed only when asked for, and a row is decoded (payload upcast to the current version) by
:class:`RowDecoder`, a base of :class:`~steplog.store.EventStore`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic_core import from_json

from ._prepare import utc

if TYPE_CHECKING:  # the event models (pydantic) load on first use: reading needs none of them
    from ..events import Catalogue, Event, JsonDict


def default_catalogue() -> Catalogue:
    """The catalogue of steplog's own event types (imported on first use)."""
    from ..events import catalogue

    return catalogue


RawRow = Sequence[Any]
"""A row as the driver returns it, in the columns of :class:`StoredEvent` (``recorded_at`` and
``payload`` undecoded on SQLite)."""


def recorded_at_of(value: Any) -> datetime:
    """A driver row's ``recorded_at`` as an aware UTC datetime (as in :class:`StoredEvent`)."""
    if type(value) is str:
        return datetime.fromisoformat(value + "+00:00")
    return value if value.tzinfo is UTC else utc(value)


class StoredEvent(NamedTuple):
    """An event as read back: its place in the log, its payload upcast to the current version.

    A named tuple: immutable, and cheap to build for every event a reader streams. The id is
    kept as the driver returned it (``event_key``) and parsed only when ``event_id`` is read.
    """

    position: int
    event_key: uuid.UUID | str
    run_id: str
    seq: int
    type: str
    schema_version: int
    recorded_at: datetime
    payload: JsonDict

    @property
    def event_id(self) -> uuid.UUID:
        """The client-generated UUIDv7 of the event."""
        key = self.event_key
        return key if isinstance(key, uuid.UUID) else _uuid_from_hex(key)

    def to_event(self, using: Catalogue | None = None) -> Event:
        """The payload as its typed event model (``using`` the default catalogue)."""
        return (using or default_catalogue()).parse(self.type, self.payload, self.schema_version)

    def to_json(self) -> JsonDict:
        """The portable form: one JSON object per event (the JSONL line format)."""
        return {
            "position": self.position,
            "event_id": str(self.event_id),
            "run_id": self.run_id,
            "seq": self.seq,
            "type": self.type,
            "schema_version": self.schema_version,
            "recorded_at": self.recorded_at.isoformat(),
            "payload": self.payload,
        }


class RowDecoder:
    """Driver rows as :class:`StoredEvent`: the catalogue, and each event type's current schema
    version (older payloads are upcast on read).

    A base of :class:`~steplog.store.EventStore` (which sets ``_catalogue`` and ``_versions``),
    not a delegate: ``_to_stored`` runs once per event read, so it stays the store's own method,
    with no call layer in between.
    """

    _catalogue: Catalogue | None
    _versions: dict[str, int] | None

    @property
    def catalogue(self) -> Catalogue:
        """The event types this store accepts (the default catalogue unless given one)."""
        if self._catalogue is None:
            self._catalogue = default_catalogue()
        return self._catalogue

    @catalogue.setter
    def catalogue(self, value: Catalogue) -> None:
        self._catalogue = value
        self._versions = None

    @property
    def _current_versions(self) -> dict[str, int]:
        if self._versions is None:
            found = self.catalogue
            self._versions = {name: found.model(name).schema_version for name in found.names()}
        return self._versions

    def payload_of(self, type_name: str, version: int, payload: Any) -> JsonDict:
        """A driver row's payload, decoded and upcast to the current version (as in
        :class:`StoredEvent`)."""
        if type(payload) is str:
            payload = from_json(payload)
        if version < self._current_versions.get(type_name, 0):
            version, payload = self.catalogue.upcast(type_name, version, payload)
        return payload  # type: ignore[no-any-return]

    def current_versions(self) -> dict[str, int]:
        """The current schema version of each event type (older payloads are upcast)."""
        return self._current_versions

    def to_stored(self, row: RawRow) -> StoredEvent:
        """A driver row (from :meth:`~steplog.store.EventStore.page_rows`) as a
        :class:`StoredEvent`."""
        return self._to_stored(row)

    def _to_stored(self, row: Sequence[Any]) -> StoredEvent:
        """A driver row (:data:`~steplog.store._read.SELECT`'s columns) as a StoredEvent: the hot
        path of every reader.

        SQLite hands back text (hex ids, ``YYYY-MM-DD HH:MM:SS.ffffff`` UTC times, JSON);
        PostgreSQL hands back UUIDs, aware datetimes and decoded JSONB.
        """
        position, event_id, run_id, seq, type_name, version, recorded_at, payload = row
        if type(payload) is str:
            payload = from_json(payload)
        if type(recorded_at) is str:
            recorded_at = datetime.fromisoformat(recorded_at + "+00:00")
        elif recorded_at.tzinfo is not UTC:
            recorded_at = utc(recorded_at)
        if version < self._current_versions.get(type_name, 0):
            version, payload = self.catalogue.upcast(type_name, version, payload)
        return StoredEvent(
            position, event_id, run_id, seq, type_name, version, recorded_at, payload
        )


def _uuid_from_hex(hex_id: str) -> uuid.UUID:
    """``uuid.UUID(hex_id)`` without its string clean-up: readers build one per event.

    The stored form is always 32 lowercase hex digits (written by steplog), so the general
    parser's stripping of braces, dashes and prefixes is pure overhead.
    """
    value = _new_uuid(uuid.UUID)
    object.__setattr__(value, "int", int(hex_id, 16))
    object.__setattr__(value, "is_safe", uuid.SafeUUID.unknown)
    return value


_new_uuid = object.__new__
