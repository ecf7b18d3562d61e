"""The rule that keeps a whole scan linear: unbounded repetition only where a match is complete.

RE2 makes each search linear. Scanning a string means many searches, one after each match, and
a search that finds a match may have read past it while an earlier-started partial match was
still alive; if partial matches could live arbitrarily long, a string dense with matches would
cost quadratic time after all. So every pattern is a bounded part (each repetition with an upper
bound) followed by a tail in which the match is already complete (``+``, ``*`` and ``{n,}``
allowed there, and only there): a partial match dies within a bounded distance, and what a
complete one reads is the match itself. Checked here on Python's parse of the pattern (RE2 and
Python agree on the syntax the kinds use).
"""

from __future__ import annotations

import re
import re._constants as _c  # type: ignore[import-not-found]  # CPython's own regex parser
import re._parser as _parser  # type: ignore[import-not-found]
from typing import Any, Final

_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT))


def unbounded_inside(pattern: str) -> list[str]:
    """Where ``pattern`` repeats without bound before its match is complete (empty: it keeps
    the rule; a pattern Python cannot parse is not judged)."""
    try:
        tree = _parser.parse(pattern)
    except (re.error, ValueError, OverflowError):
        return []
    problems: list[str] = []
    _walk(list(tree), True, problems)
    return problems


def _walk(items: list[tuple[Any, Any]], tail: bool, problems: list[str]) -> None:
    for index, (op, value) in enumerate(items):
        here = tail and all(_nullable(item) for item in items[index + 1 :])
        if op in _REPEATS:
            _, high, body = value
            unbounded = high == _c.MAXREPEAT
            if unbounded and not here:
                problems.append(f"an unbounded repetition at item {index} is not at the end")
            _walk(list(body), here and not unbounded and high <= 1, problems)
        elif op == _c.SUBPATTERN:
            _walk(list(value[-1]), here, problems)
        elif op == _c.BRANCH:
            for alternative in value[1]:
                _walk(list(alternative), here, problems)


def _nullable(item: tuple[Any, Any]) -> bool:
    """Whether ``item`` can match the empty string (so what precedes it may end a match)."""
    op, value = item
    if op in _REPEATS:
        return bool(value[0] == 0 or all(_nullable(i) for i in value[2]))
    if op == _c.AT:
        return True
    if op == _c.SUBPATTERN:
        return all(_nullable(i) for i in value[-1])
    if op == _c.BRANCH:
        return any(all(_nullable(i) for i in alternative) for alternative in value[1])
    return False


_EDGE: Final = r"(?:^|\s)"
"""The start of a command-line kind: a text's start or whitespace (no other anchor is kept by a
joined scan: see :func:`anchored`)."""
_BOUNDARIES: Final = (_c.AT_BOUNDARY, _c.AT_NON_BOUNDARY)


def anchored(pattern: str) -> bool:
    """Whether ``pattern`` holds an anchor other than ``\\b``, ``\\B`` and :data:`_EDGE` (or
    cannot be read by Python's parser, which then cannot tell): such a pattern may match a
    string alone and not the same string inside a text joined by newlines, so the joined scan
    of :meth:`~steplog.redaction.Redactor.fresh` is not used with it. :data:`_EDGE` is kept
    because the newline joining the strings is whitespace."""
    try:
        tree = _parser.parse(pattern.replace(_EDGE, r"(?:\s)"))
    except (re.error, ValueError, OverflowError, RecursionError):
        return True
    return _has_anchor(list(tree))


def _has_anchor(items: list[tuple[Any, Any]]) -> bool:
    for op, value in items:
        if op == _c.AT:
            if value not in _BOUNDARIES:
                return True
        elif op in _REPEATS:
            if _has_anchor(list(value[2])):
                return True
        elif op == _c.SUBPATTERN:
            if _has_anchor(list(value[-1])):
                return True
        elif op == _c.BRANCH:
            if any(_has_anchor(list(alternative)) for alternative in value[1]):
                return True
        elif op in (_c.ASSERT, _c.ASSERT_NOT, _c.GROUPREF_EXISTS, _c.ATOMIC_GROUP):
            return True  # not RE2 syntax: refused when compiled; not judged here
    return False
