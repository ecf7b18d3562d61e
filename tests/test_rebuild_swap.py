"""The rebuild's swap: the live read models take the shadow rows and keep their indexes, and on
PostgreSQL repeated rebuilds leave no dead copies of the read models behind."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, make_url, text

from steplog.annotations import add_to_regression_set
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.projections.library import LibraryProjection
from steplog.projections.queries import refresh
from steplog.store import EventStore, create_engine_for, upgrade

READ_MODELS = ("run_summaries", "failure_signatures", "regression_set_members")


def _read_models(store: EventStore) -> dict[str, list[tuple[Any, ...]]]:
    with store.engine.connect() as conn:
        return {
            name: sorted(tuple(row) for row in conn.exec_driver_sql(f"SELECT * FROM {name}"))
            for name in READ_MODELS
        }


def _indexes(store: EventStore) -> dict[str, list[dict[str, Any]]]:
    found = inspect(store.engine)
    return {
        name: sorted(found.get_indexes(name), key=lambda i: str(i["name"])) for name in READ_MODELS
    }


def _seed(url: str, store: EventStore, runs: int = 120) -> None:
    spec = get_scenario("customer-service")
    execute_all(url, plan_runs(spec, model_version="sim-v1", runs=runs, seed=3))
    refresh(store)
    with store.engine.connect() as conn:
        failed = [
            str(row[0])
            for row in conn.exec_driver_sql(
                "SELECT run_id FROM run_summaries WHERE status = 'failed' ORDER BY run_id LIMIT 3"
            )
        ]
    assert failed, "the seed has failed runs (regression set members need them)"
    add_to_regression_set(store, "swap", failed)


def test_the_swap_keeps_the_live_tables_indexes(store_url: str, store: EventStore) -> None:
    """SQLite's swap drops the live tables' secondary indexes and builds them again from their
    own SQL; PostgreSQL keeps them. Either way the read models keep every index, as it was."""
    _seed(store_url, store, runs=30)
    indexes, rows = _indexes(store), _read_models(store)
    assert len(indexes["run_summaries"]) >= 5
    LibraryProjection(store, rebuild_page_size=200).rebuild()
    assert _indexes(store) == indexes
    assert _read_models(store) == rows


@pytest.fixture
def private_database(pg_base_url: str) -> Iterator[str]:
    """A migrated database of its own: no other session's snapshot (other tests, benchmarks on
    the same server) can hold back what ``VACUUM`` removes, as one in a shared database could."""
    name = f"steplog_swap_{uuid.uuid4().hex[:12]}"
    admin = create_engine(pg_base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(pg_base_url).set(database=name).render_as_string(hide_password=False)
    try:
        engine = create_engine_for(url)
        upgrade(engine)
        engine.dispose()
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
def test_repeated_rebuilds_leave_no_dead_rows_on_postgres(private_database: str) -> None:
    """With autovacuum off (as on the test server and the benchmark's cached schemas) only the
    rebuild's own ``VACUUM`` frees the rows each swap deletes. Without it every rebuild leaves a
    dead copy of each read model behind: after five rebuilds the summaries table is six copies
    of its live rows; with it, never more than the two a swap holds side by side."""
    store = EventStore.open(private_database)
    with store.engine.begin() as conn:
        for name in READ_MODELS:
            conn.exec_driver_sql(f"ALTER TABLE {name} SET (autovacuum_enabled = false)")
    _seed(private_database, store)
    before = _read_models(store)
    projection = LibraryProjection(store, rebuild_page_size=500)

    def pages(name: str) -> int:
        with store.engine.connect() as conn:
            size = conn.exec_driver_sql(f"SELECT pg_relation_size('{name}')").scalar_one()
        return int(size) // 8192

    sizes = []
    for _ in range(5):
        projection.rebuild()
        assert _read_models(store) == before  # every rebuild gives the same rows
        sizes.append(pages("run_summaries"))
    with store.engine.begin() as conn:  # the pages one tightly packed copy of the rows takes
        conn.exec_driver_sql("CREATE TABLE one_copy AS SELECT * FROM run_summaries")
    one_copy = pages("one_copy")
    assert one_copy >= 3, f"the summaries span a few pages ({one_copy})"
    assert max(sizes) <= 2 * one_copy + 1, (sizes, one_copy)  # without VACUUM: 2x, 3x ... 6x
    store.close()
