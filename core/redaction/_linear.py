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
from typing import Any

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
