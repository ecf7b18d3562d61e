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
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Any, Final

import re2

from ..errors import SteplogError
from ._kinds import Kind

MASK: Final = "[REDACTED]"
_MASK: Final = MASK.encode()
_MASKS: Final = _MASK * 2
_SPACE: Final = frozenset(b" \t\r\n")
_NO_ALNUM: Final = re.compile(rb"[^A-Za-z0-9\x80-\xff]*")
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

_HEX: Final = frozenset("0123456789abcdefABCDEF")
MIN_RUN: Final = 20
"""The fewest characters of a base64 run that is decoded and scanned."""
_BASE64_RUN: Final = rb"[A-Za-z0-9+/_-]{20,}={0,2}"
_RUN: Final = re.compile(rb"([A-Za-z0-9+/]{20,})={0,2}")
"""A base64 run (URL-safe ones translated first), found by Python's ``re``: one class with a
bounded minimum is linear, and iterating its matches costs no call into RE2 per run."""
_FILL: Final = (b"", b"AAA", b"AA", b"A")
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
    """One kind's own pattern: found with it alone, which RE2 runs fastest."""

    def __init__(self, kind: Kind, number: int) -> None:
        where = f"{kind.name} (pattern {number})"
        regex = compile_pattern(kind.pattern, where=where)
        self.secrets = tuple(
            index for name, index in regex.groupindex.items() if name.decode().startswith("secret")
        )
        self.groups = regex._regexp
        bare = _without_groups(kind.pattern)  # RE2 runs a pattern with groups far slower
        self.whole = compile_pattern(bare, where=where, capture=False)._regexp

    def next_match(self, data: bytes, position: int) -> tuple[int, int] | None:
        """The first match at or after ``position`` (the whole text is its context)."""
        found: tuple[int, int] = self.whole.Match(_UNANCHORED, data, position, len(data))[0]
        return None if found == _NONE else found

    def parts(self, data: bytes, start: int, end: int) -> list[tuple[int, int]]:
        """The spans to replace in this kind's match ``data[start:end]``: its ``secret`` groups
        (the whole match when it has none, or when it is longer than :data:`MAX_CONTEXT`)."""
        if not self.secrets or end - start > MAX_CONTEXT:
            return [(start, end)]
        groups = self.groups.Match(_BOTH, data, start, end)
        found = [_mask_kept(data, groups[g]) for g in self.secrets if groups[g] != _NONE]
        return [span for span in (found or [(start, end)]) if span[1] > span[0]]


def _mask_kept(data: bytes, span: tuple[int, int]) -> tuple[int, int]:
    """A secret that is a mask and then no letter or digit (``--token [REDACTED];``) is the
    mask alone, so a second pass keeps what follows it, as the first did; a mask glued to more
    text (``password=[REDACTED]hunter2``) is replaced whole, as any secret."""
    start, end = span
    if data.startswith(_MASK, start) and _NO_ALNUM.fullmatch(data, start + len(_MASK), end):
        return start, start + len(_MASK)
    return span


class Scanner:
    """Finds and replaces every secret of the given kinds in text.

    An RE2 set of every kind (and base64 runs) says in one pass which kinds a text holds:
    most texts hold none. The kinds present are then searched for each with its own pattern,
    and their matches merged as one alternation would (leftmost first; at the same place, the
    kind listed first), each kind searched again only from where the last match taken ended.
    """

    def __init__(self, kinds: Sequence[Kind]) -> None:
        self.kinds = tuple(kinds)
        self._own = [_Own(kind, number) for number, kind in enumerate(self.kinds, start=1)]
        self._gate = re2.Set.SearchSet(options(capture=False))
        for kind in self.kinds:
            self._gate.Add(kind.pattern.encode("utf-8"))
        self._base64_index = self.base64_index = self._gate.Add(_BASE64_RUN)
        self._gate.Compile()
        self.gate_match = self._gate._set.Match
        """RE2's own call of the set: the indexes matching ``data``, an empty list for none."""

    def gate(self, data: bytes) -> bool:
        """Whether ``data`` may hold a secret: a kind or a base64 run matches somewhere in it
        (one pass of the set; when it does not, :meth:`redact` keeps a text without
        backslashes as it is)."""
        return bool(self.gate_match(data))

    # --- bytes ---------------------------------------------------------------------------------

    def _present(self, data: bytes) -> list[int]:
        """The indexes of the kinds (and base64 runs) ``data`` holds, in order."""
        return sorted(self.gate_match(data))

    def _matches(
        self, data: bytes, present: Sequence[int]
    ) -> Iterator[tuple[int, list[tuple[int, int]]]]:
        """Each match of a present kind, in order: its kind's index and the spans to replace.

        A kind that found its secret by context (``password=...``) may have taken into its
        match the start of another kind's secret (``password=-----BEGIN PRIVATE KEY...``): so
        the other kinds go on from where its secret starts, not from where its match ends, and
        a secret that starts inside it is replaced as well (every kind's search position only
        moves forward, so a scan stays linear)."""
        upcoming = {}
        for index in present:
            if index < len(self._own):
                found = self._own[index].next_match(data, 0)
                if found is not None:
                    upcoming[index] = found
        while upcoming:
            index = min(upcoming, key=lambda i: (upcoming[i][0], i))
            start, end = upcoming[index]
            parts = self._own[index].parts(data, start, end)
            yield index, parts
            own = end if end > start else end + 1
            others = min((part[0] for part in parts), default=own)
            for kind, span in list(upcoming.items()):
                position = own if kind == index else others
                if span[0] >= position:
                    continue
                found = (
                    self._own[kind].next_match(data, position) if position <= len(data) else None
                )
                if found is None:
                    del upcoming[kind]
                else:
                    upcoming[kind] = found

    def spans(self, data: bytes, present: Sequence[int] | None = None) -> list[tuple[int, int]]:
        """The byte spans of ``data`` to replace, in order (past :data:`MAX_SECRETS` secrets,
        one span from there to the end); they may overlap."""
        found: list[tuple[int, int]] = []
        kinds = self._present(data) if present is None else present
        for count, (_, parts) in enumerate(self._matches(data, kinds), start=1):
            if count > MAX_SECRETS:
                found.append((parts[0][0], len(data)))
                break
            found.extend(parts)
        return found

    def kinds_in(self, text: str) -> list[str]:
        """The names of the kinds found in ``text`` (for tests and the benchmark)."""
        data = text.encode("utf-8", "surrogatepass")
        return [self.kinds[i].name for i, _ in self._matches(data, self._present(data))]

    def _masked(self, data: bytes, present: Sequence[int] | None = None) -> bytes | None:
        spans = self.spans(data, present)
        if not spans:
            return None
        out = bytearray()
        last = 0
        for start, end in sorted(spans):
            start, end = _char_start(data, start), _char_start(data, end)
            while end > start and data[end - 1] in _SPACE:  # a secret ends before whitespace
                end -= 1
            if end <= last:
                continue  # inside what is replaced already
            if start < last:
                start = last  # overlapping: extend the replacement
            else:
                out += data[last:start] + _MASK
            last = end
        return bytes(out + data[last:])

    # --- text ----------------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[REDACTED]`` (the same object when none).

        The set (every kind and base64 runs, one pass) passes most strings over; the others
        are searched for the kinds they hold, then their base64 runs are decoded and scanned,
        then (text with backslashes) their decoded view is scanned.
        """
        if len(text) < MIN_SECRET:
            return text
        data = text.encode("utf-8", "surrogatepass")
        escaped = "\\" in text
        present = self._present(data)
        if not present and not escaped:
            return text
        changed = False
        masked = self._masked(data, present)
        if masked is not None:
            data, changed = masked, True
        if self._base64_index in present:
            encoded = self._base64_runs(data)
            if encoded is not None:
                data, changed = encoded, True
        if escaped:
            view = self._unescaped(data)
            if view is not None:
                data, changed = view, True
        if not changed:
            return text
        while _MASKS in data:  # adjacent masks are one (a second pass would join them)
            data = data.replace(_MASKS, _MASK)
        return data.decode("utf-8", "surrogatepass")

    def _base64_runs(self, data: bytes) -> bytes | None:
        """``data`` with secrets inside base64 runs replaced (re-encoded), or ``None``.

        All runs are decoded by one call and scanned as one text: each run is read in the
        standard alphabet (the URL-safe one translated), filled with ``A`` (zero bits) to whole
        quartets, and the runs joined by ``AAAA`` (three NUL bytes: no kind starts at a NUL, and
        a match running on past one only replaces more)."""
        std = data.translate(_FROM_URLSAFE)
        runs = [(m.start(), m.end(1), m.end()) for m in _RUN.finditer(std)]
        runs = [run for run in runs if (run[1] - run[0]) & 3 != 1]
        if not runs:
            return None
        pieces = [std[start:end] + _FILL[(end - start) & 3] for start, end, _ in runs]
        decoded = binascii.a2b_base64(b"AAAA".join(pieces))
        offsets = list(accumulate((len(p) // 4 * 3 + 3 for p in pieces), initial=0))
        spans = self.spans(decoded)
        if not spans:
            return None
        return self._reencoded(data, runs, decoded, offsets, spans)

    def _unescaped(self, data: bytes) -> bytes | None:
        """``data`` with its escapes (``\\uXXXX``, ``\\xXX``, ``\\/``) decoded and redacted, if
        that view holds a secret."""
        text = data.decode("utf-8", "surrogatepass")
        view = _decoded_escapes(text)
        if view == text:
            return None
        return self._masked(view.encode("utf-8", "surrogatepass"))

    def _reencoded(
        self,
        data: bytes,
        runs: list[tuple[int, int, int]],
        decoded: bytes,
        offsets: list[int],
        spans: list[tuple[int, int]],
    ) -> bytes:
        """``data`` with each run that holds a part of ``spans`` (offsets into the decoded
        runs) masked and encoded again in its own alphabet, padded as it came."""
        masks: dict[int, list[tuple[int, int]]] = {}
        for start, end in spans:
            first = bisect_right(offsets, start) - 1
            last = bisect_right(offsets, max(end - 1, start)) - 1
            for index in range(first, min(last, len(runs) - 1) + 1):
                size = (runs[index][1] - runs[index][0]) * 3 // 4  # without the fill
                low = max(start - offsets[index], 0)
                high = min(end - offsets[index], size)
                if high > low:
                    masks.setdefault(index, []).append((low, high))
        out = bytearray()
        position = 0
        for index, parts in sorted(masks.items()):
            run_start, body_end, run_end = runs[index]
            size = (body_end - run_start) * 3 // 4
            piece = decoded[offsets[index] : offsets[index] + size]
            masked, last = bytearray(), 0
            for low, high in sorted(parts):
                if high <= last:
                    continue
                masked += piece[last : max(low, last)] + _MASK
                last = high
            masked += piece[last:]
            original = data[run_start:run_end]
            encoded = binascii.b2a_base64(bytes(masked), newline=False)
            if b"-" in original or b"_" in original:
                encoded = encoded.translate(_TO_URLSAFE)
            if run_end == body_end:  # it came without padding: so it goes
                encoded = encoded.rstrip(b"=")
            out += data[position:run_start] + encoded
            position = run_end
        return bytes(out + data[position:])


def _without_groups(pattern: str) -> str:
    """``pattern`` with every capturing group made non-capturing (same matches)."""
    out: list[str] = []
    index, inside = 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            out.append(pattern[index : index + 2])
            index += 2
            continue
        if inside:
            inside = char != "]"
        elif char == "[":
            inside = True
            if pattern[index + 1 : index + 2] == "]":  # a literal ] first in the class
                out.append("[]")
                index += 2
                continue
        elif char == "(":
            rest = pattern[index + 1 :]
            named = re.match(r"\?P?<[A-Za-z_][A-Za-z0-9_]*>", rest)
            if named is not None:
                out.append("(?:")
                index += 1 + named.end()
                continue
            if not rest.startswith("?"):
                out.append("(?:")
                index += 1
                continue
        out.append(char)
        index += 1
    return "".join(out)


def _decoded_escapes(text: str) -> str:
    """``text`` with ``\\uXXXX`` (and ``\\UXXXXXXXX``), ``\\xXX`` and ``\\/`` decoded; other
    backslashes kept. Split on each marker: a string method per escape, no regex callback."""
    text = text.replace("\\/", "/")
    for marker, width in (("\\u", 4), ("\\U", 8), ("\\x", 2)):
        if marker not in text:
            continue
        pieces = text.split(marker)
        out = [pieces[0]]
        for piece in pieces[1:]:
            code = piece[:width]
            char = _CHARS.get(code)
            if char is None:
                char = _char(code, width) or marker + code
                if len(_CHARS) < 1 << 17:
                    _CHARS[code] = char
            out.append(char + piece[width:])
        text = "".join(out)
    return text


_CHARS: dict[str, str] = {}
"""Escapes seen, decoded (or kept when they are none): texts repeat the same few."""


def _char(code: str, width: int) -> str | None:
    if len(code) != width or not all(c in _HEX for c in code):
        return None
    value = int(code, 16)
    return chr(value) if value <= 0x10FFFF else "\ufffd"


def _char_start(data: bytes, index: int) -> int:
    """``index`` moved back to the first byte of the UTF-8 character it falls in."""
    while 0 < index < len(data) and 0x80 <= data[index] < 0xC0:
        index -= 1
    return index


_FROM_URLSAFE: Final = bytes.maketrans(b"-_", b"+/")
_TO_URLSAFE: Final = bytes.maketrans(b"+/", b"-_")
