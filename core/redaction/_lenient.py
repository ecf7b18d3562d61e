"""Structural redaction of JSON that does not parse: cut at a size limit, or broken.

The quarantine keeps what could not be stored, and what could not be stored is often not valid
JSON (a body cut at 64 KiB, a line with a syntax error). Scanning it only as text would miss a
secret that hides behind an escape (``"\\u0073k-..."``) or under a key that names it
(``{"token": "..."``, OTLP's ``{"key": "authorization", "value": {...}}``). So its string
literals are found with one linear scan, decoded, and redacted as values; a literal followed by
``:`` is a key, and a key that names a secret masks the value that follows it (a string literal
or a bare number). What lies between literals is scanned as text.
"""

from __future__ import annotations

import json
from typing import Final, Protocol

import re2

from ._scan import MASK


class Redactor(Protocol):
    """What this module asks of the redactor."""

    def text(self, value: str) -> str: ...

    def string(self, value: str) -> str: ...

    def names_a_secret(self, key: str) -> bool: ...


_LITERAL: Final = re2.compile(r'"(?:[^"\\]|\\[\s\S])*"?')
_NUMBER: Final = re2.compile(r"^(\s*:\s*)(-?[0-9][0-9.eE+-]*)")


class _State:
    """What the literals seen so far say about the next one."""

    def __init__(self) -> None:
        self.mask_next = False
        """The last key named a secret: the next value is replaced."""
        self.secret_pair = False
        """An OTLP pair whose ``key`` names a secret: its ``value`` is replaced."""
        self.pair_key = False
        """The last key was ``key``: the next literal is an attribute name."""


def redact_lenient(raw: str, redactor: Redactor) -> str:
    """``raw`` (not valid JSON) with every string literal redacted as a value, keys naming a
    secret masking what follows, and the text between literals scanned as text."""
    out: list[str] = []
    state = _State()
    last = 0
    for match in _LITERAL.finditer(raw):
        start, end = match.span()
        out.append(_gap(raw[last:start], redactor, state))
        literal = raw[start:end]
        out.append(_literal(literal, raw[end : end + 64].lstrip()[:1] == ":", redactor, state))
        last = end
    out.append(_gap(raw[last:], redactor, state))
    return "".join(out)


def _gap(text: str, redactor: Redactor, state: _State) -> str:
    """Text between literals: a bare number after a secret-named key is masked; a value that
    ends here (``,`` ``}`` ``]``) ends what a secret-named key masks."""
    if state.mask_next:
        number = _NUMBER.search(text)
        if number is not None:
            state.mask_next = False
            text = number.group(1) + MASK + text[number.end() :]
        elif any(mark in text for mark in ",}]"):
            state.mask_next = False
    return redactor.text(text)


def _literal(literal: str, is_key: bool, redactor: Redactor, state: _State) -> str:
    closed = len(literal) > 1 and literal.endswith('"') and not _escaped_end(literal)
    try:
        value = json.loads(literal if closed else literal + '"')
    except ValueError:
        value = None
    if not isinstance(value, str):
        return redactor.text(literal)  # not a JSON string after all: plain text
    if is_key:
        if redactor.names_a_secret(value) or (value == "value" and state.secret_pair):
            state.mask_next = True  # until a value takes it (through nested keys)
        if value == "value":
            state.secret_pair = False
        state.pair_key = value == "key"
        redacted = redactor.text(value)
    elif state.mask_next:
        state.mask_next = False
        redacted = MASK
    else:
        if state.pair_key:
            state.secret_pair = redactor.names_a_secret(value)
        state.pair_key = False
        redacted = redactor.string(value)
    if redacted == value:
        return literal
    encoded = json.dumps(redacted, ensure_ascii=False)
    return encoded if closed else encoded[:-1]


def _escaped_end(literal: str) -> bool:
    """Whether the closing quote of ``literal`` is escaped (an odd run of backslashes)."""
    body = literal[1:-1]
    return (len(body) - len(body.rstrip("\\"))) % 2 == 1
