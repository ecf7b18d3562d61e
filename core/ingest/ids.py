"""Deterministic, time-ordered event ids for imported records, so re-imports add nothing.

Native events get random UUIDv7s. Imported events must get the *same* id every time the same
record is imported (idempotence), and should still sort by time (random UUIDs make the unique
index several times slower). So: the UUIDv7 layout, with the record's own timestamp in the top
48 bits and a hash of its identity (source ids, what the event stands for) in the random bits.
"""

from __future__ import annotations

import hashlib
import uuid


def stable_event_id(unix_ms: int, *identity: str | int) -> uuid.UUID:
    """A UUIDv7 whose time is ``unix_ms`` and whose remaining bits hash ``identity``."""
    digest = hashlib.blake2b("\x1f".join(map(str, identity)).encode(), digest_size=10).digest()
    rand = int.from_bytes(digest, "big")  # 80 bits; 74 are used
    millis = max(0, min(unix_ms, (1 << 48) - 1))
    value = (millis << 80) | (0x7 << 76) | ((rand >> 68) & 0xFFF) << 64
    value |= (0b10 << 62) | (rand & ((1 << 62) - 1))
    return uuid.UUID(int=value)
