"""Failure signatures: which failures are "the same failure".

A failed (or aborted) run's signature is a hash of its scenario, the failed step with numbers
masked (``extract_07`` and ``extract_12`` fail the same way), its error type, and its message
with the parts that vary between occurrences masked: quoted values, ids (UUIDs, hex strings),
and numbers. A provider error's head -- HTTP status and error code, as the mapping writes them
(``400 context_length_exceeded: ...``, see :mod:`steplog.ingest.provider_errors`) -- is kept: two
different 400s are two different failures.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_QUOTED = re.compile(r"""(?<![A-Za-z])'[^']*'|"[^"]*\"""")
"""Quoted values; an apostrophe inside a word (``can't``) does not open a quote."""
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_HEX_ID = re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{12,}\b")
_MIXED_ID = re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]*\b")
"""Tokens mixing letters and digits (``ORD-AB12CD``, ``a1b2c3``): ids, not words."""
_SCIENTIFIC = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?[eE][-+]?\d+\b")
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")
_PROVIDER_HEAD = re.compile(r"[1-5]\d\d(?: [A-Za-z][\w.\-]{0,79})?: ")
"""``400 context_length_exceeded: ``: an HTTP status and a provider's error code."""
MAX_MESSAGE = 300


@dataclass(frozen=True, slots=True)
class Signature:
    """The grouping key of a failure and the parts it is made of."""

    id: str
    scenario: str
    step: str
    error_type: str
    message: str


def normalize_message(message: str) -> str:
    """The message with quoted values, ids and numbers masked (a provider error's status and
    code kept)."""
    head = _PROVIDER_HEAD.match(message)
    if head:
        return (head.group() + _masked(message[head.end() :]))[:MAX_MESSAGE]
    return _masked(message)


def _masked(message: str) -> str:
    masked = _QUOTED.sub("<str>", message)
    masked = _UUID.sub("<id>", masked)
    masked = _HEX_ID.sub("<id>", masked)
    masked = _SCIENTIFIC.sub("<n>", masked)
    masked = _MIXED_ID.sub("<id>", masked)
    masked = _NUMBER.sub("<n>", masked)
    return _SPACE.sub(" ", masked).strip()[:MAX_MESSAGE]


def normalize_step(step: str | None) -> str:
    """The step name with numbers masked; ``(run)`` for failures outside any step."""
    return _NUMBER.sub("#", step) if step else "(run)"


def signature_of(
    scenario: str, step: str | None, error_type: str, message: str | None
) -> Signature:
    """The signature of one failure."""
    parts = (scenario, normalize_step(step), error_type, normalize_message(message or ""))
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]
    return Signature(digest, *parts)
