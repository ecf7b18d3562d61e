"""Deterministic, time-ordered event ids for imported records, so re-imports add nothing.

Native events get random UUIDv7s. Imported events must get the *same* id every time the same
record is imported (idempotence), and should still sort by time (random UUIDs make the unique
index several times slower). So: the UUIDv7 layout, with the record's own timestamp in the top
48 bits and a hash of its identity (source ids, what the event stands for) in the random bits.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..store import NewEvent

if TYPE_CHECKING:
    from ..events import Event

_blake2b = hashlib.blake2b
_from_bytes = int.from_bytes
_UUID = uuid.UUID
_new_uuid = uuid.UUID.__new__
_set_int = uuid.UUID.__dict__["int"].__set__  # the slots' own setters: no attribute look-up
_set_safe = uuid.UUID.__dict__["is_safe"].__set__
_UNKNOWN = uuid.SafeUUID.unknown
_RAND_LOW = (1 << 62) - 1
_MAX_MILLIS = (1 << 48) - 1
_FIXED = (0x7 << 76) | (0b10 << 62)  # version 7, RFC 4122 variant
_fromtimestamp = datetime.fromtimestamp
_new_object = object.__new__
_SET_EVENT = NewEvent.__dict__["event"].__set__
_SET_ID = NewEvent.__dict__["event_id"].__set__
_SET_AT = NewEvent.__dict__["recorded_at"].__set__


def stable_event_id(unix_ms: int, *identity: str | int) -> uuid.UUID:
    """A UUIDv7 whose time is ``unix_ms`` and whose remaining bits hash ``identity``."""
    return stable_event_id_of(unix_ms, "\x1f".join(map(str, identity)))


def stable_event_id_of(unix_ms: int, key: str) -> uuid.UUID:
    """:func:`stable_event_id` of an identity already joined with ``"\\x1f"`` (a mapping that
    makes many ids of one trace builds ``key`` from a prefix it keeps)."""
    digest = _blake2b(key.encode(), digest_size=10).digest()
    rand = _from_bytes(digest)  # 80 bits, big-endian; 74 are used
    millis = unix_ms if 0 <= unix_ms <= _MAX_MILLIS else max(0, min(unix_ms, _MAX_MILLIS))
    value = (millis << 80) | _FIXED | ((rand >> 68) & 0xFFF) << 64 | (rand & _RAND_LOW)
    # what ``uuid.UUID(int=value)`` builds, without its argument checks (this runs for every
    # imported event; ``value`` is 128 bits by construction)
    made = _new_uuid(_UUID)
    _set_int(made, value)
    _set_safe(made, _UNKNOWN)
    return made


def stable_event_ids(prefix: str) -> Callable[[int, str], uuid.UUID]:
    """``of(unix_ms, rest)``, the id :func:`stable_event_id_of` gives ``(unix_ms, prefix +
    rest)``, for a mapping that makes many ids sharing ``prefix`` (a trace's id): the hash
    state after ``prefix`` is kept and copied for each id, which costs less than making a
    hasher (its keyword arguments parsed) and encoding the whole identity every time."""
    copy = _blake2b(prefix.encode(), digest_size=10).copy
    from_bytes, new_uuid, uuid_class = _from_bytes, _new_uuid, _UUID
    set_int, set_safe, unknown = _set_int, _set_safe, _UNKNOWN
    high = 0xFFF << 64
    low, top, fixed = _RAND_LOW, _MAX_MILLIS, _FIXED

    def of(unix_ms: int, rest: str) -> uuid.UUID:
        hasher = copy()
        hasher.update(rest.encode())
        rand = from_bytes(hasher.digest())  # 80 bits, big-endian; 74 are used
        millis = unix_ms if 0 <= unix_ms <= top else max(0, min(unix_ms, top))
        made = new_uuid(uuid_class)  # the layout of stable_event_id_of, in fewer operations
        set_int(made, (millis << 80) | fixed | (rand >> 4 & high) | (rand & low))
        set_safe(made, unknown)
        return made

    return of


def stable_new_events(
    prefix: str, events: Sequence[Event], stamps: Sequence[int], rests: Sequence[str]
) -> list[NewEvent]:
    """``NewEvent(event, event_id=stable_event_ids(prefix)(ns // 10**6, rest),
    recorded_at=<ns as a UTC time>)`` for each event, its time ``ns`` (nanoseconds since the
    epoch) and ``rest`` of its identity: how a mapping makes a trace's events, all in one loop
    (no call per event; each distinct time laid out and converted once, as a trace's events
    share them; the events built without the frozen class's checks)."""
    copy = _blake2b(prefix.encode(), digest_size=10).copy
    from_bytes, new_uuid, uuid_class = _from_bytes, _new_uuid, _UUID
    set_int, set_safe, unknown = _set_int, _set_safe, _UNKNOWN
    new, set_event, set_id, set_at = _new_object, _SET_EVENT, _SET_ID, _SET_AT
    high, low = 0xFFF << 64, _RAND_LOW
    times: dict[int, tuple[int, datetime]] = {}  # ns -> (the id's time bits, the datetime)
    made: list[NewEvent] = []
    append = made.append
    for event, ns, rest in zip(events, stamps, rests, strict=True):
        known = times.get(ns)
        if known is None:
            unix_ms = ns // 1_000_000
            clamped = unix_ms if 0 <= unix_ms <= _MAX_MILLIS else max(0, min(unix_ms, _MAX_MILLIS))
            known = times[ns] = ((clamped << 80) | _FIXED, _fromtimestamp(ns / 1e9, UTC))
        hasher = copy()
        hasher.update(rest.encode())
        rand = from_bytes(hasher.digest())  # 80 bits, big-endian; 74 are used
        event_id = new_uuid(uuid_class)
        set_int(event_id, known[0] | (rand >> 4 & high) | (rand & low))
        set_safe(event_id, unknown)
        one = new(NewEvent)
        set_event(one, event)
        set_id(one, event_id)
        set_at(one, known[1])
        append(one)
    return made
