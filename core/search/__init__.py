"""Search across runs: full-text search over runs' inputs, outputs, errors, tool arguments and
model calls, filtered by version, scenario, status, start time and tags.

The index is a projection (:class:`SearchIndex`, checkpoint ``search``): caught up with the log
before every search, rebuildable from it (``steplog search --rebuild``). SQLite searches it
with FTS5, PostgreSQL with a ``tsvector`` column and a GIN index; one query rule
(:mod:`._query`) serves both, so a query means the same on either engine. The guide is
``steplog guide search``.
"""

from __future__ import annotations

from ..read_models import SearchHit
from ._extract import KINDS, MAX_TEXT, entries, tags
from ._index import SearchIndex
from ._query import MAX_QUERY, SearchQueryError, parse
from ._search import MAX_LIMIT, refresh_index, search, tag_filters

__all__ = [
    "KINDS",
    "MAX_LIMIT",
    "MAX_QUERY",
    "MAX_TEXT",
    "SearchHit",
    "SearchIndex",
    "SearchQueryError",
    "entries",
    "parse",
    "refresh_index",
    "search",
    "tag_filters",
    "tags",
]
