"""The assembler's statements on the OTLP staging tables are planned as index look-ups, on a
PostgreSQL store too new to have statistics (the state of every store in its first minute, and
of a queue table whose size changes by the second).

Every statement an assembly round sends that reads or deletes staged or archived spans is
EXPLAINed on its own connection, in its own transaction, just before it runs, so the plans are
the plans it ran with. Without the index hint the claim and the reads of a round were planned
as scans of the whole backlog (13.7M rows read in one 30 s benchmark run).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.otlp import agent_trace, request
from sqlalchemy import event

from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.spans import decode_document
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

pytestmark = pytest.mark.postgres

QUEUE_TABLES = ("otlp_spans", "otlp_traces")


@pytest.fixture
def fresh_store(pg_schemas: Any) -> Iterator[EventStore]:
    """A store in a schema of its own, never analyzed."""
    store = EventStore.open(pg_schemas.new(migrate=True))
    yield store
    store.close()


def _stage(store: EventStore, traces: int) -> OtlpIngest:
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    rng = random.Random(3)
    spans = [s for _ in range(traces) for s in agent_trace(rng)]
    for start in range(0, len(spans), 500):
        ingest.receive(decode_document(request(*spans[start : start + 500])))
    return ingest


def _plans_of_queue_statements(store: EventStore) -> list[tuple[str, str]]:
    """Install a hook that EXPLAINs every SELECT/DELETE on the queue tables before it runs."""
    plans: list[tuple[str, str]] = []

    def explain(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        head = statement.lstrip().upper()
        if not head.startswith(("SELECT", "DELETE")) or not any(
            table in statement for table in QUEUE_TABLES
        ):
            return
        raw = conn.connection.dbapi_connection.cursor()
        try:
            raw.execute("EXPLAIN " + statement, params)
            plans.append((statement, "\n".join(row[0] for row in raw.fetchall())))
        finally:
            raw.close()

    event.listen(store.engine, "before_cursor_execute", explain)
    return plans


def test_an_assembly_round_reads_and_claims_the_backlog_by_index(fresh_store: EventStore) -> None:
    ingest = _stage(fresh_store, 400)  # 1,200 staged spans, no statistics
    plans = _plans_of_queue_statements(fresh_store)
    real_fetch = fresh_store._fetch

    def fetch(conn: Any, sql: str, params: Any) -> list[Any]:  # the claim: driver-level
        if "otlp_spans" in sql or "otlp_traces" in sql:
            plan = real_fetch(conn, "EXPLAIN " + sql, params)
            plans.append((sql, "\n".join(row[0] for row in plan)))
        return real_fetch(conn, sql, params)

    fresh_store._fetch = fetch  # type: ignore[method-assign]
    assert ingest.assemble().runs == 400
    kinds = {statement.split()[0].upper() for statement, _ in plans}
    assert kinds == {"SELECT", "DELETE"}, plans  # the reads, the claim: all seen
    for statement, plan in plans:
        assert "Seq Scan on otlp_spans" not in plan, (statement, plan)
        assert "Seq Scan on otlp_traces" not in plan, (statement, plan)


def test_the_ready_look_up_reads_a_page_of_the_key_index(fresh_store: EventStore) -> None:
    ingest = _stage(fresh_store, 400)
    plans: list[tuple[str, str]] = []
    real_fetch = fresh_store._fetch

    def fetch(conn: Any, sql: str, params: Any) -> list[Any]:  # driver-level: no SQLAlchemy hook
        plan = real_fetch(conn, "EXPLAIN " + sql, params)
        plans.append((sql, "\n".join(row[0] for row in plan)))
        return real_fetch(conn, sql, params)

    fresh_store._fetch = fetch  # type: ignore[method-assign]
    assert len(ingest.ready_traces(limit=50)) == 50
    plan = next(p for sql, p in plans if "ORDER BY trace_id, span_id" in sql)
    assert "Index Scan using otlp_spans_pkey" in plan, plan
    assert "Seq Scan" not in plan and "Sort" not in plan, plan
