"""One scan per string: every kind of secret joined into one RE2 alternation.

RE2 runs a regular expression as an automaton, so a search costs time linear in the text
whatever the pattern and the text hold (no backtracking: ``a.a.a...`` against a URL or JWT
pattern costs what any other text of its length costs). Every built-in kind is also written so
that a partial match dies within a bounded distance (unbounded repetition only where the match
is already complete, a property test checks it): a search that found a match has then read at
most a bounded distance past it, and scanning a whole string stays linear however many secrets
it holds. The text is scanned as UTF-8 bytes; replacements are made on the bytes.

Two views of a string are scanned besides the text itself:

* **escapes** (``\\u0073k-...``, ``\\x73``, ``\\/``): text that carries JSON or Python escapes is
  also scanned with them decoded; if that view holds a secret, the decoded view, redacted, is
  what is kept (so an escaped secret cannot slip past to a reader that decodes it);
* **base64** (a ``bytesValue``, a ``data:`` URL, an encoded header): each run of 20 or more
  base64 characters is decoded and scanned, and re-encoded with its secrets replaced.

Most strings hold none of these: one RE2 search over the string for any kind, base64 run or
escape says so, and the string is kept as it is.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterator, Sequence
from typing import Any, Final

import re2

from ..errors import SteplogError
from ._kinds import Kind

MASK: Final = "[REDACTED]"
_MASK: Final = MASK.encode()
MAX_MEMORY: Final = 64 << 20
"""RE2's budget for the automaton's cache; when it runs out RE2 falls back to a slower (still
linear) engine, so it is sized for one alternation of every kind over megabytes of text."""
MIN_SECRET: Final = 6
"""No kind matches fewer characters (a property test checks it): shorter strings are kept."""
MAX_CONTEXT: Final = 4096
"""A context kind's match longer than this is replaced whole, its context too (finding the
``secret`` group inside costs RE2's slower submatch engine, in proportion to the length)."""
MAX_SECRETS: Final = 1000
"""Secrets replaced one by one in one string; past them the rest of the string is replaced
whole (a text made of secrets is not worth keeping, and each costs a call into RE2)."""

_ESCAPE: Final = re.compile(r"\\(?:u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|x[0-9A-Fa-f]{2}|/)")
"""Escapes, found by Python's ``re``: fixed-length alternatives after a literal backslash, so
no backtracking is possible (and a callable replacement is cheap here, unlike RE2's)."""
_BASE64_RUN: Final = rb"[A-Za-z0-9+/_-]{20,}={0,2}"
_PRINTABLE: Final = re.compile(rb"[\x21-\x7e]{6}")
"""Six printable ASCII characters in a row (a charset run: no backtracking)."""
_STANDARD: Final = frozenset(b"+/")
_URLSAFE: Final = frozenset(b"-_")
_UNANCHORED: Final = re2._Anchor.UNANCHORED
_BOTH: Final = re2._Anchor.ANCHOR_BOTH
_NONE: Final = (-1, -1)


def options(*, capture: bool = True) -> Any:
    """RE2 options for every pattern here: bytes as Latin-1 (UTF-8 text is scanned byte by
    byte: every kind is ASCII, and a negated class then costs one range, not dozens of UTF-8
    sequences), a larger cache."""
    chosen = re2.Options()
    chosen.max_mem = MAX_MEMORY
    chosen.encoding = re2.Options.Encoding.LATIN1
    chosen.never_capture = not capture
    return chosen


def compile_pattern(pattern: str, *, where: str, capture: bool = True) -> Any:
    """``pattern`` compiled by RE2 (bytes mode); a bad one is a clear error naming ``where``."""
    try:
        return re2.compile(pattern.encode("utf-8"), options(capture=capture))
    except re2.error as exc:
        raise SteplogError(
            f"{where}: {pattern!r} is not a regular expression RE2 accepts "
            f"(no lookarounds or backreferences): {exc}"
        ) from None


def _spans(regex: Any, data: bytes) -> Iterator[tuple[int, int]]:
    """Every non-overlapping match of ``regex`` in ``data`` (RE2's own call, no wrapper)."""
    engine = regex._regexp
    position, end = 0, len(data)
    while position <= end:
        found = engine.Match(_UNANCHORED, data, position, end)[0]
        if found == _NONE:
            return
        yield found
        position = found[1] if found[1] > found[0] else found[1] + 1


class _Own:
    """One kind's own pattern: which of its groups are secrets, which bytes can start it."""

    def __init__(self, kind: Kind, number: int) -> None:
        where = f"{kind.name} (pattern {number})"
        regex = compile_pattern(kind.pattern, where=where)
        self.secrets = tuple(
            index for name, index in regex.groupindex.items() if name.decode().startswith("secret")
        )
        self.whole = compile_pattern(kind.pattern, where=where, capture=False)._regexp
        self.engine = regex._regexp if self.secrets else self.whole
        ok, low, high = self.engine.PossibleMatchRange(16)
        self.first = range(low[0], high[0] + 1) if ok and low and high else range(256)
        self.low: bytes = low if ok and low else b""
        self.high: bytes = high if ok and high else b"\xff" * 64
        """Every match lies between these two strings (RE2 says so): a cheap first test."""

    def parts(self, data: bytes, start: int, end: int) -> list[tuple[int, int]] | None:
        """The spans to replace if this kind matches exactly ``data[start:end]``."""
        if not self.low <= data[start : start + 16] <= self.high:
            return None
        if self.secrets and end - start > MAX_CONTEXT:
            found = self.whole.Match(_BOTH, data, start, end)[0]
            return None if found == _NONE else [found]
        groups = self.engine.Match(_BOTH, data, start, end)
        if groups[0] == _NONE:
            return None
        found = [groups[g] for g in self.secrets if groups[g] != _NONE]
        return [span for span in (found or [groups[0]]) if span[1] > span[0]]


class Scanner:
    """Finds and replaces every secret of the given kinds in text, in one automaton pass.

    The kinds are joined into one alternation compiled without capturing groups, which RE2 runs
    as a DFA alone: that finds each match's span. Which kind matched (the first one listed that
    matches exactly that span) and where its ``secret`` groups are is then asked of the kind's
    own small pattern on that span only.
    """

    def __init__(self, kinds: Sequence[Kind]) -> None:
        self.kinds = tuple(kinds)
        self._own = [_Own(kind, number) for number, kind in enumerate(self.kinds, start=1)]
        self._by_first = [
            tuple(i for i, own in enumerate(self._own) if byte in own.first) for byte in range(256)
        ]
        joined = "|".join(f"(?:{kind.pattern})" for kind in self.kinds) or r"\b\B"
        self._any = compile_pattern(joined, where="the joined patterns", capture=False)
        self._gate = compile_pattern(
            "|".join([joined, _BASE64_RUN.decode()]), where="the gate", capture=False
        )._regexp
        self._base64 = compile_pattern(_BASE64_RUN.decode(), where="base64", capture=False)

    # --- bytes ---------------------------------------------------------------------------------

    def _matches(self, data: bytes) -> Iterator[tuple[int, list[tuple[int, int]]]]:
        """Each match of a kind in ``data``: the kind's index and the spans to replace."""
        for start, end in _spans(self._any, data):
            if end == start:
                continue
            for index in self._by_first[data[start]]:
                parts = self._own[index].parts(data, start, end)
                if parts is not None:
                    yield index, parts
                    break
            else:  # no single kind matches the span exactly (cannot happen): replace it all
                yield -1, [(start, end)]

    def spans(self, data: bytes) -> list[tuple[int, int]]:
        """The byte spans of ``data`` to replace, in order (past :data:`MAX_SECRETS` secrets,
        one span from there to the end)."""
        found: list[tuple[int, int]] = []
        for count, (_, parts) in enumerate(self._matches(data), start=1):
            if count > MAX_SECRETS:
                found.append((parts[0][0], len(data)))
                break
            found.extend(parts)
        return found

    def kinds_in(self, text: str) -> list[str]:
        """The names of the kinds found in ``text`` (for tests and the benchmark)."""
        data = text.encode("utf-8", "surrogatepass")
        return [self.kinds[i].name if i >= 0 else "?" for i, _ in self._matches(data)]

    def _masked(self, data: bytes) -> bytes | None:
        spans = self.spans(data)
        if not spans:
            return None
        out = bytearray()
        last = 0
        for start, end in spans:
            start, end = _char_start(data, start), _char_start(data, end)
            if start < last:
                start = last
            out += data[last:start]
            out += _MASK
            last = max(end, start)
        out += data[last:]
        return bytes(out)

    # --- text ----------------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[REDACTED]`` (the same object when none).

        The gate (every kind and base64 runs, one search) passes most strings over; the others
        are scanned for kinds, then their base64 runs are decoded and scanned, then (text with
        backslashes) their decoded view is scanned.
        """
        if len(text) < MIN_SECRET:
            return text
        data = text.encode("utf-8", "surrogatepass")
        escaped = "\\" in text
        if not escaped and self._gate.Match(_UNANCHORED, data, 0, len(data))[0] == _NONE:
            return text
        changed = False
        masked = self._masked(data)
        if masked is not None:
            data, changed = masked, True
        encoded = self._base64_runs(data)
        if encoded is not None:
            data, changed = encoded, True
        if escaped:
            view = self._unescaped(data)
            if view is not None:
                data, changed = view, True
        return data.decode("utf-8", "surrogatepass") if changed else text

    def _base64_runs(self, data: bytes) -> bytes | None:
        """``data`` with secrets inside base64 runs replaced (re-encoded), or ``None``."""
        out = bytearray()
        last = 0
        for start, end in _spans(self._base64, data):
            replaced = self._base64_run(data[start:end])
            if replaced is not None:
                out += data[last:start] + replaced
                last = end
        if last == 0:
            return None
        return bytes(out + data[last:])

    def _unescaped(self, data: bytes) -> bytes | None:
        """``data`` with its escapes (``\\uXXXX``, ``\\xXX``, ``\\/``) decoded and redacted, if
        that view holds a secret."""
        text = data.decode("utf-8", "surrogatepass")
        view = _ESCAPE.sub(_decoded_escape, text)
        if view == text:
            return None
        return self._masked(view.encode("utf-8", "surrogatepass"))

    def _base64_run(self, run: bytes) -> bytes | None:
        body = run.rstrip(b"=")
        chars = frozenset(body)
        urlsafe = bool(chars & _URLSAFE)
        if (urlsafe and chars & _STANDARD) or len(body) % 4 == 1:
            return None  # not one base64 text
        if urlsafe:
            body = body.translate(_FROM_URLSAFE)
        try:
            decoded = binascii.a2b_base64(body + b"=" * (-len(body) % 4))
        except binascii.Error:
            return None
        if _PRINTABLE.search(decoded) is None:
            return None  # binary through and through: no secret is shorter than this
        masked = self._masked(decoded)
        if masked is None:
            return None
        encoded = binascii.b2a_base64(masked, newline=False)
        if urlsafe:
            encoded = encoded.translate(_TO_URLSAFE)
        return encoded if run.endswith(b"=") else encoded.rstrip(b"=")


def _decoded_escape(match: re.Match[str]) -> str:
    token = match.group(0)
    if token == "\\/":
        return "/"
    code = int(token[2:], 16)
    return chr(code) if code <= 0x10FFFF else "\ufffd"


def _char_start(data: bytes, index: int) -> int:
    """``index`` moved back to the first byte of the UTF-8 character it falls in."""
    while 0 < index < len(data) and 0x80 <= data[index] < 0xC0:
        index -= 1
    return index


_FROM_URLSAFE: Final = bytes.maketrans(b"-_", b"+/")
_TO_URLSAFE: Final = bytes.maketrans(b"+/", b"-_")
