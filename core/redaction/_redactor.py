"""The redactor: secrets replaced in text, in JSON-like values and in raw documents."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Final

from ..errors import SteplogError
from ._kinds import KINDS, SECRET_KEY, Kind
from ._lenient import redact_lenient
from ._linear import anchored, unbounded_inside
from ._scan import MASK, MIN_RUN, Scanner, compile_pattern

MAX_CACHED_KEY: Final = 256
MAX_CACHED_KEYS: Final = 65536
"""Mapping keys up to this length, and this many, are remembered (keys repeat endlessly)."""
MAX_DEPTH: Final = 200
"""JSON nested deeper than this (inside a string, in a document) is scanned as text."""
_JSON_TOKEN: Final = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{}]')
_JSON_OPENERS: Final = ("{", "[")
_SCALARS: Final = frozenset({int, float, bool, type(None)})
_JSON_CLOSERS: Final = ("}", "]")
MAX_JOINED: Final = 1 << 20
"""A value whose strings join to more bytes than this is redacted string by string (one scan
of a joined text gains nothing at that size, and RE2's set keeps within its memory)."""
_SEPARATOR: Final = "\n"
"""What joins a value's strings for :meth:`Redactor.fresh`'s one scan: whitespace and no word
character, so ``\\b`` and the ``(?:^|\\s)`` that starts a command-line kind hold at every
string's edges in the joined text as they do in the string alone."""
_JSON_START: Final = re.compile(r"(?:\A|\n)\s*[\[{]")
"""Where a joined string may start with JSON (after what ``str.lstrip`` strips: Python's ``\\s``
is the same set of characters): such strings are redacted structurally, one by one."""


@dataclass(frozen=True, slots=True, eq=False)
class Redactor:
    """Replaces secrets in strings and in JSON-like values (see :mod:`steplog.redaction`)."""

    kinds: tuple[Kind, ...] = KINDS
    scanner: Scanner = field(init=False, repr=False)
    _key: Callable[[str], tuple[str, bool]] = field(init=False, repr=False)
    _joinable: bool = field(init=False, repr=False)
    """No kind is anchored (bar ``(?:^|\\s)``): :meth:`fresh` may scan a value's strings joined."""
    _plain_keys: set[str] = field(init=False, repr=False)
    """Mapping keys known not to name a secret (:meth:`fresh`'s walk: one set lookup a key)."""
    _unchanged: set[str] = field(init=False, repr=False)
    """Strings of base64 runs known to hold no secret (:meth:`_clean`: one set lookup each)."""
    _gate: Callable[[bytes], list[int]] = field(init=False, repr=False)
    _base64_only: list[int] = field(init=False, repr=False)
    """What the set finds in a text whose only candidates are base64 runs."""
    """The scanner's set of every kind and base64 run (RE2's own call: empty, none found)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "scanner", Scanner(self.kinds))
        joinable = not any(anchored(kind.pattern) for kind in self.kinds)
        object.__setattr__(self, "_joinable", joinable)
        object.__setattr__(self, "_plain_keys", set())
        object.__setattr__(self, "_unchanged", set())
        object.__setattr__(self, "_gate", self.scanner.gate_match)
        object.__setattr__(self, "_base64_only", [self.scanner.base64_index])
        secret_key = compile_pattern(SECRET_KEY, where="the secret key names")
        redact = self.scanner.redact

        cache: dict[str, tuple[str, bool]] = {}

        def key(name: str) -> tuple[str, bool]:
            found = cache.get(name)
            if found is None:
                data = name.encode("utf-8", "surrogatepass")
                found = redact(name), secret_key.fullmatch(data) is not None
                if len(name) <= MAX_CACHED_KEY and len(cache) < MAX_CACHED_KEYS:
                    cache[name] = found
            return found

        object.__setattr__(self, "_key", key)

    @classmethod
    def from_patterns(cls, patterns: Iterable[str], *, origin: str = "pattern") -> Redactor:
        """The built-in kinds plus ``patterns`` (RE2 syntax; a bad one is a clear error naming
        ``origin`` and its number)."""
        extra = []
        for number, text in enumerate(patterns, start=1):
            where = f"{origin} {number}"
            compile_pattern(text, where=where)
            if unbounded_inside(text):
                raise SteplogError(
                    f"{where}: {text!r} repeats without bound before its match is complete; "
                    "use a bounded repetition there ({0,64} instead of *): only the end of a "
                    "pattern may repeat without bound, which keeps redaction linear in time"
                )
            extra.append(Kind(where, text))
        return cls(KINDS + tuple(extra))

    # --- strings -------------------------------------------------------------------------------

    def text(self, value: str) -> str:
        """``value`` with every secret replaced by ``[REDACTED]``."""
        return self.scanner.redact(value)

    def names_a_secret(self, key: str) -> bool:
        """Whether a mapping key names a secret (``api_key``, ``authorization``...)."""
        return self._key(key)[1]

    def string(self, value: str) -> str:
        """A string value: JSON inside it redacted structurally (then re-serialised, only if
        something was replaced), any other text as :meth:`text`."""
        if value[:1] in _JSON_OPENERS or value.lstrip()[:1] in _JSON_OPENERS:
            parsed = _json_of(value)
            if isinstance(parsed, dict | list):
                redacted = self.value(parsed)
                if redacted == parsed:
                    return value
                return json.dumps(redacted, ensure_ascii=False)
        return self.text(value)

    # --- structures ----------------------------------------------------------------------------

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with secrets redacted: every string (keys too, JSON inside
        strings structurally), and the whole value of a key that names a secret."""
        if type(value) in _SCALARS:  # numbers, booleans and null hold no secret
            return value
        if isinstance(value, str):
            return self.string(value)
        if type(value) is list:  # before the Mapping check, which walks the ABC registry
            return [self.value(item) for item in value]
        if type(value) is dict or isinstance(value, Mapping):
            pair_key = value.get("key")  # OTLP's {"key": name, "value": {...}} attributes
            secret_pair = (
                isinstance(pair_key, str) and "value" in value and self.names_a_secret(pair_key)
            )
            result = {}
            for key, item in value.items():
                if isinstance(key, str):
                    key, secret = self._key(key)
                    secret = secret or (secret_pair and key == "value")
                else:
                    secret = False
                result[key] = MASK if secret and _maskable(item) else self.value(item)
            return result
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value

    def fresh(self, value: Any) -> Any:
        """``value`` redacted exactly as :meth:`value` redacts it, for a JSON-like value the
        caller has just made and gives up (the recorder's :func:`~steplog.canonical.jsonable`
        output): ``value`` itself, not a copy, when it holds no secret.

        One scan instead of one a string: every string of ``value`` (keys too) is joined by a
        newline and the joined text is scanned once by the set of every kind and base64 run
        (:class:`~._scan.Scanner`); if nothing there can change -- no match, no backslash (an
        escape the per-string path decodes), no string that starts as JSON (redacted
        structurally), no key that names a secret, only plain ``dict``, ``list``, ``str`` and
        scalars, at most :data:`MAX_JOINED` bytes -- nothing is replaced, and ``value`` is
        returned. Otherwise, or when a kind is anchored (a ``^`` or ``$`` sees the joined text
        differently), it is :meth:`value`'s. Exact: a match inside one string is a match of the
        joined text (the newline around it is what its edges are alone, for ``\\b`` and
        ``(?:^|\\s)``); a joined text may match where no string does (across two), which only
        sends the value to :meth:`value`."""
        kind = type(value)
        if kind in _SCALARS:
            return value
        if kind is str:
            return self.string(value)
        strings: list[str] = []
        if self._joinable and self._gathered(value, strings.append) and self._clean(strings):
            return value
        return self.value(value)

    def fresh_pair(self, first: Any, second: Any) -> tuple[Any, Any]:
        """``(fresh(first), fresh(second))`` with one scan of both when neither holds a
        secret (a call's request and response): the strings of both joined, checked as
        :meth:`fresh` checks one value's (a joined text that holds the strings of each holds
        the strings of either); when that finds something, each is :meth:`fresh`'s."""
        strings: list[str] = []
        add = strings.append
        if (
            self._joinable
            and self._gathered(first, add)
            and self._gathered(second, add)
            and self._clean(strings)
        ):
            return first, second
        return self.fresh(first), self.fresh(second)

    def _gathered(self, value: Any, add: Callable[[str], None]) -> bool:
        """``add`` every string of ``value`` (a string itself, none of a scalar); ``False`` when
        the joined scan cannot decide for it (see :func:`_gather`)."""
        kind = type(value)
        if kind is str:
            add(value)
            return True
        if kind in _SCALARS:
            return True
        try:
            return _gather(value, add, self._plain_keys, self._plain_key)
        except RecursionError:
            return False

    def _clean(self, strings: list[str]) -> bool:
        """Whether ``strings``, joined, leave nothing to replace: no backslash, no string that
        starts as JSON, no kind or base64 run anywhere, at most :data:`MAX_JOINED` bytes."""
        joined = _SEPARATOR.join(strings)
        if "\\" in joined or (
            ("{" in joined or "[" in joined) and _JSON_START.search(joined) is not None
        ):
            return False
        data = joined.encode("utf-8", "surrogatepass")
        if len(data) > MAX_JOINED:
            return False
        found = self._gate(data)
        if not found:
            return True
        if found != self._base64_only:
            return False
        # Only base64 runs (a URL path of 20 letters is one): no kind is in any string, so a
        # string changes only if a run in it decodes to a secret -- which its own scan says
        # (a run lies within one string: the newline is not base64). Strings shorter than a
        # run hold none; strings its own scan left unchanged before are remembered (the same
        # path on every call of a client: ``/v1/chat/completions`` is a run).
        redact, unchanged = self.scanner.redact, self._unchanged
        for text in strings:
            if len(text) < MIN_RUN or text in unchanged:
                continue
            if redact(text) is not text:
                return False
            if len(text) <= MAX_CACHED_KEY and len(unchanged) < MAX_CACHED_KEYS:
                unchanged.add(text)
        return True

    def _plain_key(self, key: str) -> bool:
        """Whether ``key`` names no secret (remembered, as :attr:`_key` remembers keys)."""
        if self._key(key)[1]:
            return False
        if len(key) <= MAX_CACHED_KEY and len(self._plain_keys) < MAX_CACHED_KEYS:
            self._plain_keys.add(key)
        return True

    def document(self, raw: str) -> str:
        """Raw input kept for the quarantine, redacted structurally: parsed as JSON when it is
        (and returned unchanged when it held no secret); when it is not (cut short, broken), its
        string literals are still decoded and redacted one by one, keys naming a secret mask
        what follows them (:mod:`._lenient`), and the rest is scanned as text."""
        if raw.lstrip()[:1] in (*_JSON_OPENERS, '"'):
            parsed = _json_of(raw)
            if parsed is not None or raw.strip() == "null":
                redacted = self.value(parsed)
                return raw if redacted == parsed else json.dumps(redacted, ensure_ascii=False)
        return redact_lenient(raw, self)


def _gather(
    value: Any, add: Callable[[str], None], plain: set[str], plain_key: Callable[[str], bool]
) -> bool:
    """``add`` every string of a ``dict`` or ``list`` (keys too); ``False`` when
    :meth:`Redactor.fresh` cannot decide on the joined text: another type (a tuple, a
    subclass), a key that names a secret, an OTLP pair whose name does (``plain``: keys known
    to name none; ``plain_key`` tells, and remembers, the others)."""
    if type(value) is dict:
        if "key" in value and "value" in value:  # an OTLP pair: its name may mask it
            name = value["key"]
            if isinstance(name, str) and not plain_key(name):
                return False
        for key, item in value.items():
            if type(key) is str:
                if key not in plain and not plain_key(key):
                    return False
                add(key)
            elif isinstance(key, str):
                return False
            kind = type(item)
            if kind is str:
                add(item)
            elif kind not in _SCALARS and not _gather(item, add, plain, plain_key):
                return False
        return True
    if type(value) is list:
        for item in value:
            kind = type(item)
            if kind is str:
                add(item)
            elif kind not in _SCALARS and not _gather(item, add, plain, plain_key):
                return False
        return True
    return False


def _too_deep(text: str) -> bool:
    """Whether JSON ``text`` nests deeper than :data:`MAX_DEPTH` (strings skipped whole, so
    brackets inside them do not count; possessive quantifiers: linear)."""
    depth = 0
    for match in _JSON_TOKEN.finditer(text):
        first = match.group()[0]
        if first in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif first in "]}":
            depth = max(depth - 1, 0)
    return False


def _maskable(item: Any) -> bool:
    """A secret-named key's value is replaced unless it cannot be a secret (null, a flag)."""
    return item is not None and not isinstance(item, bool)


def _json_of(text: str) -> Any:
    """``text`` parsed as JSON (nesting bounded first), or ``None``."""
    stripped = text.strip()
    if not stripped or (stripped[:1] in _JSON_OPENERS and stripped[-1:] not in _JSON_CLOSERS):
        return None
    if _too_deep(stripped):
        return None
    with suppress(ValueError, RecursionError):
        return json.loads(stripped)
    return None
