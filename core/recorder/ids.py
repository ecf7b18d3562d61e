"""Event ids in bulk: UUIDv7 (RFC 9562), made a batch at a time for the recorder's flushes.

``uuid6.uuid7()`` costs a clock read, a ``secrets`` call and a checked ``UUID(int=...)`` per id,
which is a measurable share of recording a run (every event gets an id). Here one flush makes
all its ids from one clock read and one ``os.urandom`` call, and builds the ``UUID`` objects
without re-checking the integer (it is built to the layout below).

Layout (RFC 9562 §5.7, with §6.2 method 1's counter): 48-bit Unix time in milliseconds, version
7, a 12-bit counter in ``rand_a`` (random start each millisecond, +1 per id), the variant, and 62
random bits. Ids from this generator are strictly increasing within a process: when a batch
would run the counter out within one millisecond, it takes the next millisecond (as ``uuid6``
does when its clock has not moved).
"""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid

from uuid6 import UUID

_VERSION_AND_VARIANT = (7 << 76) | (0b10 << 62)
_RAND_B = (1 << 62) - 1
_COUNTER_MAX = 0xFFF
_ONE = 1 << 64
"""One step of the counter in ``rand_a``."""
_NEW = object.__new__
_SET_INT = uuid.UUID.__dict__["int"].__set__
_SET_SAFE = uuid.UUID.__dict__["is_safe"].__set__
"""``uuid.UUID``'s slots, set through their descriptors (it refuses ``setattr``)."""
_UNKNOWN = uuid.SafeUUID.unknown
_WORDS: dict[int, struct.Struct] = {}
"""``count + 1`` big-endian 64-bit words, by count (a flush makes a handful of sizes)."""

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_ids(count: int) -> list[uuid.UUID]:
    """``count`` fresh UUIDv7 event ids, in increasing order."""
    global _last_ms, _counter
    if count <= 0:
        return []
    if count > _COUNTER_MAX + 1:  # the counter holds 4,096 ids per millisecond
        return new_ids(_COUNTER_MAX + 1) + new_ids(count - _COUNTER_MAX - 1)
    unpack = _WORDS.get(count)
    if unpack is None:
        unpack = _WORDS[count] = struct.Struct(f">{count + 1}Q")
    words = unpack.unpack(os.urandom(8 * (count + 1)))
    now = time.time_ns() // 1_000_000
    with _lock:
        if now > _last_ms:
            _last_ms, _counter = now, words[count] & 0x7FF  # headroom: the top bit starts at 0
        else:
            _counter += 1
        ms, counter = _last_ms, _counter
        if counter + count > _COUNTER_MAX + 1:  # rare: more ids in one millisecond than 4096
            ms, counter = ms + 1, 0
        _last_ms, _counter = ms, counter + count - 1
    high = (ms << 80) | _VERSION_AND_VARIANT | (counter << 64)
    ids: list[uuid.UUID] = []
    append = ids.append
    for word in words[:count]:
        new = _NEW(UUID)
        _SET_INT(new, high | (word & _RAND_B))
        _SET_SAFE(new, _UNKNOWN)
        append(new)
        high += _ONE
    return ids
