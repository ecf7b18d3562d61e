"""Searching the index: runs whose texts match a query, filtered by what the runs are."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Integer, Select, exists, func, select, text
from sqlalchemy.exc import DBAPIError

from ..errors import DatabaseFullError, DatabaseLockedError, DatabaseReadOnlyError
from ..models import run_summaries_table as runs_t
from ..models import run_tags_table as tags_t
from ..models import search_entries_table as entries_t
from ..projections.queries import refresh
from ..read_models import SearchHit
from ..store import EventStore, StoreLike, classify, explain, is_sqlite, opened
from ._index import SearchIndex
from ._query import SearchQueryError, Term, fts5, parse, snippet, tsquery

MAX_LIMIT = 1000


def search(
    db: StoreLike,
    query: str,
    *,
    version: str | None = None,
    scenario: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    tags: Mapping[str, str] | Iterable[str] | None = None,
    limit: int = 50,
) -> list[SearchHit]:
    """Runs whose inputs, outputs, errors, tool arguments or model calls match ``query``,
    newest first, one hit per run (its first match, with a snippet).

    ``query`` is words and ``"quoted phrases"``, all of which must match (``word*``: a prefix);
    see :mod:`steplog.search`. Filters: ``version`` (the model version), ``scenario``,
    ``status``, the run's start in ``[since, until)``, and ``tags`` (``{"key": "value"}`` or
    ``["key=value", ...]``: every one must be the run's). Bad input raises
    :class:`SearchQueryError` with a one-line reason.
    """
    terms = parse(query)
    wanted = tag_filters(tags)
    if not 1 <= limit <= MAX_LIMIT:
        raise SearchQueryError(f"limit must be between 1 and {MAX_LIMIT}, not {limit}")
    since, until = _utc(since), _utc(until)
    if since is not None and until is not None and since >= until:
        raise SearchQueryError(f"since ({since.isoformat()}) is not before until")
    with opened(db) as store:
        refresh(store)
        refresh_index(store)
        with store.engine.connect() as conn:
            found = _runs(conn, terms, version, scenario, status, since, until, wanted, limit)
            snippets = _snippets(conn, terms, [row.first for row in found])
    return [
        SearchHit(
            run_id=row.run_id,
            where=snippets[row.first][0],
            step=snippets[row.first][1],
            step_index=snippets[row.first][2],
            snippet=snippets[row.first][3],
            matches=row.matches,
            scenario=row.scenario,
            model_version=row.model_version,
            status=row.status,
            started_at=_utc(row.started_at) or row.started_at,
        )
        for row in found
    ]


def tag_filters(tags: Mapping[str, str] | Iterable[str] | None) -> dict[str, str]:
    """``tags`` as ``{key: value}``; a ``key=value`` string without ``=`` or key is refused."""
    if tags is None:
        return {}
    if isinstance(tags, Mapping):
        return {str(key): str(value) for key, value in tags.items()}
    found: dict[str, str] = {}
    for item in tags:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SearchQueryError(f"tag {item!r} is not key=value (e.g. user_id=u-17)")
        found[key.strip()] = value.strip()
    return found


def refresh_index(store: EventStore) -> int:
    """Catch the search index up with the log; return the events read.

    A store that cannot be written (read-only, full, locked past the busy timeout) is searched
    as last indexed, and a warning on standard error says so.
    """
    index = SearchIndex(store)
    try:
        if index.checkpoint() >= store.last_position():
            return 0
        return index.catch_up()
    except DBAPIError as exc:
        if classify(exc) not in ("read_only", "full", "busy"):
            raise
        reason = str(explain(store.engine, exc))
    except (DatabaseReadOnlyError, DatabaseFullError, DatabaseLockedError) as exc:
        reason = str(exc)
    print(f"warning: searching the index as last caught up (stale): {reason}", file=sys.stderr)
    return 0


def _matching(conn: Connection, terms: tuple[Term, ...]) -> Any:
    """The condition on ``search_entries`` that its text matches ``terms``."""
    if is_sqlite(conn):
        ids = text("SELECT rowid FROM search_fts WHERE search_fts MATCH :match")
        return entries_t.c.id.in_(ids.bindparams(match=fts5(terms)).columns(rowid=Integer))
    return text("search_entries.search_tsv @@ to_tsquery('simple', :match)").bindparams(
        match=tsquery(terms)
    )


def _runs(
    conn: Connection,
    terms: tuple[Term, ...],
    version: str | None,
    scenario: str | None,
    status: str | None,
    since: datetime | None,
    until: datetime | None,
    wanted: dict[str, str],
    limit: int,
) -> list[Any]:
    query: Select[Any] = (
        select(
            runs_t.c.run_id,
            func.min(entries_t.c.id).label("first"),
            func.count().label("matches"),
            runs_t.c.scenario,
            runs_t.c.model_version,
            runs_t.c.status,
            runs_t.c.started_at,
        )
        .select_from(entries_t.join(runs_t, runs_t.c.run_id == entries_t.c.run_id))
        .where(_matching(conn, terms))
        .group_by(runs_t.c.run_id)
        .order_by(runs_t.c.started_at.desc(), runs_t.c.run_id)
        .limit(limit)
    )
    for column, value in (
        (runs_t.c.model_version, version),
        (runs_t.c.scenario, scenario),
        (runs_t.c.status, status),
    ):
        if value is not None:
            query = query.where(column == value)
    if since is not None:
        query = query.where(runs_t.c.started_at >= since)
    if until is not None:
        query = query.where(runs_t.c.started_at < until)
    for key, value in wanted.items():
        query = query.where(
            exists().where(
                tags_t.c.run_id == runs_t.c.run_id, tags_t.c.key == key, tags_t.c.value == value
            )
        )
    return list(conn.execute(query))


def _snippets(
    conn: Connection, terms: tuple[Term, ...], ids: list[int]
) -> dict[int, tuple[str, str | None, int | None, str]]:
    """Where each entry of ``ids`` is and a snippet of its text around the match."""
    found: dict[int, tuple[str, str | None, int | None, str]] = {}
    for start in range(0, len(ids), 500):
        rows = conn.execute(
            select(
                entries_t.c.id, entries_t.c.kind, entries_t.c.step, entries_t.c.step_index,
                entries_t.c.text,
            ).where(entries_t.c.id.in_(ids[start : start + 500]))
        )  # fmt: skip
        for row in rows:
            found[int(row.id)] = (row.kind, row.step, row.step_index, snippet(row.text, terms))
    return found


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
