"""Tables of the event store. The schema changes only through Alembic migrations.

The tables are SQLAlchemy Core: every reader and writer uses Core statements (bulk inserts,
plain selects), and declaring them as SQLModel classes cost every command a quarter of a second
of imports (the ORM) for nothing used. A test keeps these tables and the migrations identical.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.expression import false
from sqlalchemy.types import TypeDecorator, TypeEngine

# Positions are assigned by the store inside its write lock, so they are never autoincremented.
# On SQLite the column must be INTEGER to alias the rowid (a BIGINT primary key would not).
PositionType = BigInteger().with_variant(Integer(), "sqlite")


class JSONPayload(TypeDecorator[Any]):
    """JSON text on SQLite, JSONB on PostgreSQL; the store binds already-serialized JSON text.

    Serialization happens once, in the store, where the size limit is checked; this type only
    passes the text through (PostgreSQL casts it to JSONB). Results come back as text on SQLite
    and as decoded objects on PostgreSQL; the store accepts both.
    """

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB  # only PostgreSQL stores pay for it

            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(Text())

    def bind_processor(self, dialect: Dialect) -> None:
        return None

    def result_processor(self, dialect: Dialect, coltype: object) -> None:
        return None


metadata = MetaData()


def _when(name: str, *, nullable: bool = False) -> Column[Any]:
    return Column(name, DateTime(timezone=True), nullable=nullable)


events_table = Table(
    "events",
    metadata,
    # One immutable event. ``position`` is global and commit-ordered; ``seq`` is per run.
    Column("position", PositionType, primary_key=True, autoincrement=False),
    Column("event_id", Uuid(), nullable=False),
    Column("run_id", String(255), nullable=False),
    Column("seq", Integer(), nullable=False),
    Column("type", String(100), nullable=False),
    Column("schema_version", Integer(), nullable=False),
    _when("recorded_at"),
    Column("payload", JSONPayload(), nullable=False),
    UniqueConstraint("run_id", "seq", name="uq_events_run_id_seq"),
    UniqueConstraint("event_id", name="uq_events_event_id"),
)

quarantine_table = Table(
    "quarantine",
    metadata,
    # Input that could not be stored, kept with the reason, for inspection and retry.
    Column("id", Integer(), primary_key=True),
    _when("received_at"),
    Column("source", String(500), nullable=False, index=True),
    Column("location", String(200), nullable=False),
    Column("reason", Text(), nullable=False),
    Column("raw", Text(), nullable=False),
    _when("resolved_at", nullable=True),
    Column("resolution", Text(), nullable=True),
)

staged_spans_table = Table(
    "otlp_spans",
    metadata,
    # An OTLP span received and acknowledged, waiting for the rest of its trace. Spans arrive
    # children first and in many requests; a trace becomes a run once its root has arrived (or
    # it has been idle long enough). Until then its spans live here, durably: a 200 to the
    # exporter means the span is committed, never that it sits in memory.
    Column("trace_id", String(32), primary_key=True),
    Column("span_id", String(16), primary_key=True),
    _when("received_at"),
    Column("is_root", Boolean(), nullable=False),
    Column("body", Text(), nullable=False),
    Index("ix_otlp_spans_received_at", "received_at"),
)

archived_traces_table = Table(
    "otlp_traces",
    metadata,
    # Every span of an assembled trace, compressed, kept after its run was stored: late spans
    # are merged into it (the run is revised) and ``steplog reassemble`` maps it again.
    Column("trace_id", String(32), primary_key=True),
    Column("run_id", String(255), nullable=False),
    Column("span_count", Integer(), nullable=False),
    # zlib-compressed JSON: a list of spans in their compact form (``Span.to_compact``).
    Column("spans", LargeBinary(), nullable=False),
    # When the trace first became a run: late spans are taken for a window after it.
    _when("assembled_at"),
    _when("updated_at"),
    # Whether the run was assembled without its root (under a synthetic root): it waits for it.
    Column("root_missing", Boolean(), nullable=False, server_default=false()),
)


# --- read models (projections): rebuilt from the events at any time ----------------------------

run_summaries_table = Table(
    "run_summaries",
    metadata,
    # One row per run: what the failure library, metrics and the UI's filters read.
    Column("run_id", String(255), primary_key=True),
    Column("scenario", String(200), nullable=False),
    Column("task_instance_id", String(255)),
    Column("task_type", String(200)),
    Column("model_version", String(200), nullable=False),
    Column("agent", String(255), nullable=False),
    Column("agent_version", String(50), nullable=False),
    Column("seed", BigInteger()),
    Column("source", String(50), nullable=False),
    Column("status", String(30), nullable=False),
    Column("steps_planned", Integer(), nullable=False),
    Column("steps_done", Integer(), nullable=False),
    Column("failed_step", String(255)),
    Column("failed_step_index", Integer()),
    Column("error_type", String(200)),
    Column("failure_message", Text()),
    Column("signature", String(64)),
    Column("retries", Integer(), nullable=False),
    Column("tokens", BigInteger(), nullable=False),
    Column("cost_usd", Float(), nullable=False),
    Column("duration_s", Float()),
    Column("first_step_correct", Boolean()),
    Column("mid_run_errors", Integer(), nullable=False),
    Column("mid_run_recovered", Integer(), nullable=False),
    Column("replay_of", String(255)),
    Column("forked_from", String(255)),
    Column("fork_step", Integer()),
    # A rerun of another run (a regression check): excluded from evidence like replays/forks.
    Column("rerun_of", String(255)),
    # The session or conversation the run belongs to (runs of one session group together).
    Column("session_id", String(200)),
    # The run's source has known gaps (spans whose parent never arrived).
    Column("incomplete", Boolean(), nullable=False, server_default=false()),
    _when("started_at"),
    _when("ended_at", nullable=True),
    Column("last_position", BigInteger(), nullable=False),
    Index("ix_run_summaries_scenario_version", "scenario", "model_version"),
    Index("ix_run_summaries_status", "status"),
    Index("ix_run_summaries_signature_started", "signature", "started_at", "run_id"),
    Index("ix_run_summaries_started_at", "started_at"),
    Index("ix_run_summaries_replay_of", "replay_of"),
    Index("ix_run_summaries_forked_from", "forked_from"),
    Index("ix_run_summaries_rerun_of", "rerun_of"),
    Index("ix_run_summaries_session", "session_id", "started_at"),
)

failure_signatures_table = Table(
    "failure_signatures",
    metadata,
    # A failure mode: failed runs grouped by scenario, step, error type and message pattern.
    Column("signature", String(64), primary_key=True),
    Column("scenario", String(200), nullable=False),
    Column("step", String(255), nullable=False),
    Column("error_type", String(200), nullable=False),
    Column("message", Text(), nullable=False),
    Column("count", Integer(), nullable=False),
    Column("counts_by_version", JSON(), nullable=False),
    _when("first_seen_at"),
    _when("last_seen_at"),
    Column("first_position", BigInteger(), nullable=False),
    Column("last_position", BigInteger(), nullable=False),
    Column("exemplars", JSON(), nullable=False),
    Column("labels", JSON(), nullable=False),
    Column("regression_sets", JSON(), nullable=False),
    Column("status", String(20), nullable=False),
    Column("fixed_at_position", BigInteger()),
    Index("ix_failure_signatures_scenario", "scenario"),
    Index("ix_failure_signatures_status", "status"),
)

regression_members_table = Table(
    "regression_set_members",
    metadata,
    # A failed run promoted to a named regression set.
    Column("set_name", String(200), primary_key=True),
    Column("run_id", String(255), primary_key=True),
    Column("signature", String(64)),
    Column("note", Text()),
    _when("added_at"),
    Column("position", BigInteger(), nullable=False),
)

checkpoints_table = Table(
    "projection_checkpoints",
    metadata,
    # How far each projection has read the log; written in the same transaction as its rows.
    Column("name", String(100), primary_key=True),
    Column("position", BigInteger(), nullable=False),
    _when("updated_at"),
)
