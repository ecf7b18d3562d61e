"""The public read API of the library: failures and runs as SQLModel read models.

Each call takes the store as ``db`` (an open :class:`~steplog.store.EventStore`, a URL or SQLite
path that must exist, or None for the default store), catches the read models up with the log
and returns typed objects (:mod:`steplog.read_models`). ``steplog.failures`` and
``steplog.runs`` are these functions.
"""

from __future__ import annotations

from ..read_models import FailureSample, RunSummary
from ..store import StoreLike, opened
from .queries import SortKey, list_failures, list_runs, refresh


def failures(
    db: StoreLike = None,
    *,
    scenario: str | None = None,
    model_version: str | None = None,
    status: str | None = None,
    step: str | None = None,
    error_type: str | None = None,
    label: str | None = None,
    search: str | None = None,
    sort: SortKey = "count",
    limit: int = 50,
    offset: int = 0,
) -> list[FailureSample]:
    """The failure-sample library (``steplog failures``): signatures filtered and sorted, most
    frequent first by default; ``model_version`` keeps those that version produced."""
    with opened(db) as store:
        refresh(store)
        return list_failures(
            store,
            scenario=scenario,
            model_version=model_version,
            status=status,
            step=step,
            error_type=error_type,
            label=label,
            search=search,
            sort=sort,
            limit=limit,
            offset=offset,
        )


def runs(
    db: StoreLike = None,
    *,
    scenario: str | None = None,
    model_version: str | None = None,
    status: str | None = None,
    signature: str | None = None,
    search: str | None = None,
    session: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[RunSummary]:
    """Run summaries, newest first (``steplog runs``); ``search`` matches run id or instance."""
    with opened(db) as store:
        refresh(store)
        return list_runs(
            store,
            scenario=scenario,
            model_version=model_version,
            status=status,
            signature=signature,
            search=search,
            session=session,
            limit=limit,
            offset=offset,
        )
