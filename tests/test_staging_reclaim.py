"""The staging table gives its space back once the queue drains (PostgreSQL), and reclaiming
never blocks or breaks assembly: a busy table is skipped, SQLite is left alone."""

from __future__ import annotations

import gzip
from typing import Any

import pytest
from sqlalchemy import text

from steplog.bench.ingest_client import build_requests
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.reclaim import StagingReclaimer
from steplog.ingest.otlp.spans import decode_protobuf
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore


@pytest.fixture
def pg_fresh(pg_schemas: Any) -> str:
    """A migrated schema of this test's own: the staging table's size is its alone."""
    return pg_schemas.new(migrate=True)


def _stage(ingest: OtlpIngest, traces: int, seed: int) -> None:
    for body in build_requests(traces, 10, seed=seed)[0]:
        ingest.receive(decode_protobuf(gzip.decompress(body)))


def _staging_bytes(store: EventStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_total_relation_size('otlp_spans')")).scalar())


@pytest.mark.postgres
def test_a_drained_queue_is_truncated_to_nothing(pg_fresh: str) -> None:
    store = EventStore.open(pg_fresh)
    try:
        ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
        ingest.reclaimer.after_spans = 1_000
        _stage(ingest, 300, seed=11)  # 3,000 spans staged: hundreds of kilobytes
        staged = _staging_bytes(store)
        report = ingest.assemble()
        assert report.runs == 300
        assert ingest.reclaimer.vacuums == 1 and ingest.reclaimer.last_error is None
        assert _staging_bytes(store) < staged / 4  # heap and index back to their first pages
        # the queue still works: more spans staged and assembled after the truncate
        _stage(ingest, 5, seed=12)
        assert ingest.assemble().runs == 5
        assert store.count_runs() == 305
    finally:
        store.close()


@pytest.mark.postgres
def test_a_locked_queue_is_skipped_and_assembly_goes_on(pg_fresh: str) -> None:
    store = EventStore.open(pg_fresh)
    other = EventStore.open(pg_fresh)
    try:
        ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
        _stage(ingest, 20, seed=13)
        assert ingest.assemble().runs == 20
        ingest.reclaimer.claimed_since = ingest.reclaimer.after_spans  # due now
        with other.engine.begin() as conn:  # a receiver's transaction holds the table
            conn.execute(text("LOCK TABLE otlp_spans IN ROW EXCLUSIVE MODE"))
            assert ingest.reclaimer.drained() is False
        assert ingest.reclaimer.last_error is not None
        assert "lock" in ingest.reclaimer.last_error.lower()
        _stage(ingest, 3, seed=14)
        assert ingest.assemble().runs == 3
    finally:
        other.close()
        store.close()


def test_sqlite_needs_no_reclaiming(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = EventStore.open(f"sqlite:///{tmp_path / 'staging.db'}")
    try:
        reclaimer = StagingReclaimer(store, after_spans=1)
        reclaimer.claimed(10)
        assert reclaimer.enabled is False and reclaimer.drained() is False
        assert reclaimer.vacuums == 0
    finally:
        store.close()
