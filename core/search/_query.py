"""The search query: parsed once by one rule, then spelled for each engine's full-text search.

A query is words and ``"quoted phrases"``; every one must match (AND). A word ending in ``*``
matches as a prefix. A word is split into the runs of letters and digits it holds, exactly as
both indexes split the text, so ``spot_check`` or ``example.com`` is looked for as the phrase of
its parts. Nothing else is syntax: ``AND``, ``OR``, ``NOT``, ``NEAR``, ``-``, ``:``, ``^`` and
parentheses are words or separators, never operators, so no query can fail inside the
database. What cannot be searched is refused in one line (:class:`SearchQueryError`): an empty
query, an unbalanced quote, a query with no letters or digits, or one too long.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..errors import SteplogError

MAX_QUERY = 1000
"""Characters a query may have."""
MAX_TERMS = 32
"""Words and phrases a query may have."""

_TOKEN = re.compile(r"[^\W_]+")


class SearchQueryError(SteplogError, ValueError):
    """A query or filter that cannot be searched; the message says why, in one line."""


class Term(NamedTuple):
    """One word or phrase: its tokens in order; ``prefix``: the last matches as a prefix."""

    tokens: tuple[str, ...]
    prefix: bool = False


def parse(query: str) -> tuple[Term, ...]:
    """The terms of ``query`` (see the module's rule), or :class:`SearchQueryError`."""
    if len(query) > MAX_QUERY:
        raise SearchQueryError(
            f"the query has {len(query):,} characters; at most {MAX_QUERY:,} are searched"
        )
    if not query.strip():
        raise SearchQueryError('the query is empty: give a word or a "quoted phrase"')
    if query.count('"') % 2:
        at = query.rindex('"') + 1
        raise SearchQueryError(f"unbalanced double quote at character {at}: close the phrase")
    terms: list[Term] = []
    for index, part in enumerate(query.split('"')):
        if index % 2:  # inside quotes: one phrase
            terms.append(Term(tuple(_TOKEN.findall(part.lower()))))
            continue
        for word in part.split():
            terms.append(Term(tuple(_TOKEN.findall(word.lower())), word.endswith("*")))
    kept = tuple(term for term in terms if term.tokens)
    if not kept:
        raise SearchQueryError(f"the query {query[:60]!r} has no letters or digits to look for")
    if len(kept) > MAX_TERMS:
        raise SearchQueryError(f"the query has {len(kept)} words or phrases; at most {MAX_TERMS}")
    return kept


def fts5(terms: tuple[Term, ...]) -> str:
    """The terms as an SQLite FTS5 ``MATCH`` expression (phrases of bare tokens, ANDed)."""
    return " ".join(f'"{" ".join(t.tokens)}"' + ("*" if t.prefix else "") for t in terms)


def tsquery(terms: tuple[Term, ...]) -> str:
    """The terms as PostgreSQL ``to_tsquery`` text (``<->`` within a phrase, ``&`` between)."""
    spelled = []
    for term in terms:
        words = [f"'{token}'" for token in term.tokens]
        if term.prefix:
            words[-1] += ":*"
        spelled.append("(" + " <-> ".join(words) + ")")
    return " & ".join(spelled)


def snippet(text: str, terms: tuple[Term, ...], width: int = 160) -> str:
    """A piece of ``text`` around its first match of ``terms``, each matched word between
    ``«`` and ``»``, cut at ``…`` (the same on both engines: made here, not by the database).

    Matching follows the query's rule (words of letters and digits, case folded); a match the
    index found through a folding this does not do (an accent) shows the text's start unmarked.
    """
    flat = " ".join(text.split())
    found = sorted(
        (match.start(), match.end())
        for pattern in map(_pattern, terms)
        for match in pattern.finditer(flat)
    )
    first = found[0][0] if found else 0
    start = max(0, first - width // 3)
    if start:
        start = flat.find(" ", start, first) + 1 or start
    end = min(len(flat), start + width)
    pieces, at = [], start
    for begin, stop in found:
        if begin < at or stop > end:
            continue
        pieces += [flat[at:begin], "«", flat[begin:stop], "»"]
        at = stop
    pieces.append(flat[at:end])
    return ("…" if start else "") + "".join(pieces) + ("…" if end < len(flat) else "")


def _pattern(term: Term) -> re.Pattern[str]:
    words = [re.escape(token) for token in term.tokens]
    tail = r"[^\W_]*" if term.prefix else ""
    return re.compile(r"(?<![^\W_])" + r"[\W_]+".join(words) + tail + r"(?![^\W_])", re.I)
