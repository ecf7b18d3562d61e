"""The hot read and write queries are served by an index on both engines, never a table scan.

SQLite: ``EXPLAIN QUERY PLAN`` must say SEARCH (an index or the primary key), never a bare
``SCAN events``. PostgreSQL: on a small table the planner rightly prefers a sequential scan, so
the plan is asked for with ``enable_seqscan = off``: a query that an index can serve then shows
an index scan, one that no index can serve still shows ``Seq Scan on events``.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from steplog.events import StepStarted
from steplog.store import EventStore

HOT_QUERIES = {
    # EventStore.read_run
    "read_run": "SELECT position, payload FROM events WHERE run_id = :run AND seq >= :seq "
    "ORDER BY seq",
    # EventStore.read_all / page: the cursor every reader and projection pages with
    "page": "SELECT position, payload FROM events WHERE position > :after ORDER BY position "
    "LIMIT 1000",
    # the append's version and last position (store_append)
    "version": "SELECT max(seq) FROM events WHERE run_id = :run",
    "last position": "SELECT max(position) FROM events",
    # the idempotency look-up after a conflict
    "by id": "SELECT position FROM events WHERE event_id = :id",
}


def _plan(store: EventStore, sql: str) -> str:
    params = {"run": "r-1", "seq": 0, "after": 0, "id": "0" * 32}
    with store.engine.connect() as conn:
        if store.engine.dialect.name == "sqlite":
            rows = conn.execute(text(f"EXPLAIN QUERY PLAN {sql}"), params).all()
            return "\n".join(str(row[-1]) for row in rows)
        if params["id"] == "0" * 32:
            params["id"] = "00000000-0000-0000-0000-000000000000"
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        rows = conn.execute(text(f"EXPLAIN {sql}"), params).all()
        return "\n".join(str(row[0]) for row in rows)


@pytest.mark.parametrize("name", list(HOT_QUERIES))
def test_hot_queries_use_an_index(store: EventStore, name: str) -> None:
    for run in range(3):
        store.append(f"r-{run}", [StepStarted(step="s", step_index=i) for i in range(20)], 0)
    plan = _plan(store, HOT_QUERIES[name])
    if store.engine.dialect.name == "sqlite":
        assert "SCAN events" not in plan.replace("SCAN events USING", "SEARCH"), plan
        assert "SEARCH" in plan or "USING" in plan, plan
    else:
        assert "Seq Scan on events" not in plan, plan
        assert "Index" in plan, plan


def test_the_check_fails_for_a_query_no_index_serves(store: EventStore) -> None:
    """The assertion above can fail: a filter on an unindexed column is a full scan."""
    store.append("r-0", [StepStarted(step="s", step_index=0)], 0)
    plan = _plan(store, "SELECT position FROM events WHERE type = 'StepStarted'")
    if store.engine.dialect.name == "sqlite":
        assert "SCAN events" in plan and "USING" not in plan, plan
    else:
        assert "Seq Scan on events" in plan, plan


def test_sqlite_append_statement_looks_up_by_index(tmp_path: object) -> None:
    """The append's look-up (store_append) reads the run's last seq and the last position by
    index, never by scanning the log."""
    from steplog.store._sqlite_write import _SQLITE_PLACE

    store = EventStore.open(f"{tmp_path}/plan.db")
    try:
        store.append("r-0", [StepStarted(step="s", step_index=i) for i in range(20)], 0)
        with store.engine.connect() as conn:
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {_SQLITE_PLACE}", ("r-0",)).all()
        plan = "\n".join(str(row[-1]) for row in rows)
        assert "SCAN events" not in plan, plan
        assert "SEARCH events USING COVERING INDEX" in plan and "SEARCH events\n" in plan + "\n"
    finally:
        store.close()
