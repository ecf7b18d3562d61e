"""Tables of the event store. The schema changes only through Alembic migrations."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, ClassVar

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
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.expression import false
from sqlalchemy.types import TypeDecorator, TypeEngine
from sqlmodel import Field, SQLModel

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
            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(Text())

    def bind_processor(self, dialect: Dialect) -> None:
        return None

    def result_processor(self, dialect: Dialect, coltype: object) -> None:
        return None


class StoredEventRow(SQLModel, table=True):
    """One immutable event. ``position`` is global and commit-ordered; ``seq`` is per run."""

    __tablename__: ClassVar[str] = "events"
    __table_args__ = (
        UniqueConstraint("run_id", "seq", name="uq_events_run_id_seq"),
        UniqueConstraint("event_id", name="uq_events_event_id"),
    )

    position: int = Field(
        sa_column=Column("position", PositionType, primary_key=True, autoincrement=False)
    )
    event_id: uuid.UUID = Field(sa_column=Column("event_id", Uuid(), nullable=False))
    run_id: str = Field(sa_column=Column("run_id", String(255), nullable=False))
    seq: int = Field(sa_column=Column("seq", Integer(), nullable=False))
    type: str = Field(sa_column=Column("type", String(100), nullable=False))
    schema_version: int = Field(sa_column=Column("schema_version", Integer(), nullable=False))
    recorded_at: datetime = Field(
        sa_column=Column("recorded_at", DateTime(timezone=True), nullable=False)
    )
    payload: Any = Field(sa_column=Column("payload", JSONPayload(), nullable=False))


class QuarantinedRecord(SQLModel, table=True):
    """Input that could not be stored, kept verbatim with the reason, for inspection and retry."""

    __tablename__: ClassVar[str] = "quarantine"

    id: int | None = Field(default=None, primary_key=True)
    received_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    source: str = Field(sa_column=Column(String(500), nullable=False, index=True))
    location: str = Field(sa_column=Column(String(200), nullable=False))
    reason: str = Field(sa_column=Column(Text(), nullable=False))
    raw: str = Field(sa_column=Column(Text(), nullable=False))
    resolved_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    resolution: str | None = Field(default=None, sa_column=Column(Text(), nullable=True))


class StagedSpan(SQLModel, table=True):
    """An OTLP span received and acknowledged, waiting for the rest of its trace.

    Spans arrive children first and in many requests; a trace becomes a run once its root has
    arrived (or it has been idle long enough). Until then its spans live here, durably: a 200 to
    the exporter means the span is committed, never that it sits in memory.
    """

    __tablename__: ClassVar[str] = "otlp_spans"
    __table_args__ = (Index("ix_otlp_spans_received_at", "received_at"),)

    trace_id: str = Field(sa_column=Column(String(32), primary_key=True))
    span_id: str = Field(sa_column=Column(String(16), primary_key=True))
    received_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    is_root: bool = Field(sa_column=Column(Boolean(), nullable=False))
    body: str = Field(sa_column=Column(Text(), nullable=False))


class ArchivedTrace(SQLModel, table=True):
    """Every span of an assembled trace, compressed, kept after its run was stored: late spans
    are merged into it (the run is revised) and ``steplog reassemble`` maps it again."""

    __tablename__: ClassVar[str] = "otlp_traces"

    trace_id: str = Field(sa_column=Column(String(32), primary_key=True))
    run_id: str = Field(sa_column=Column(String(255), nullable=False))
    span_count: int = Field(sa_column=Column(Integer(), nullable=False))
    spans: bytes = Field(sa_column=Column(LargeBinary(), nullable=False))
    """zlib-compressed JSON: a list of spans in their compact form (``Span.to_compact``)."""
    assembled_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    """When the trace first became a run: late spans are taken for a window after it."""
    updated_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))


events_table = StoredEventRow.__table__  # type: ignore[attr-defined]
quarantine_table = QuarantinedRecord.__table__  # type: ignore[attr-defined]
staged_spans_table = StagedSpan.__table__  # type: ignore[attr-defined]
archived_traces_table = ArchivedTrace.__table__  # type: ignore[attr-defined]


# --- read models (projections): rebuilt from the events at any time ----------------------------


class RunSummaryRow(SQLModel, table=True):
    """One row per run: what the failure library, metrics and the UI's filters read."""

    __tablename__: ClassVar[str] = "run_summaries"
    __table_args__ = (
        Index("ix_run_summaries_scenario_version", "scenario", "model_version"),
        Index("ix_run_summaries_status", "status"),
        Index("ix_run_summaries_signature_started", "signature", "started_at", "run_id"),
        Index("ix_run_summaries_started_at", "started_at"),
        Index("ix_run_summaries_replay_of", "replay_of"),
        Index("ix_run_summaries_forked_from", "forked_from"),
        Index("ix_run_summaries_session", "session_id", "started_at"),
    )

    run_id: str = Field(sa_column=Column(String(255), primary_key=True))
    scenario: str = Field(sa_column=Column(String(200), nullable=False))
    task_instance_id: str | None = Field(default=None, sa_column=Column(String(255)))
    task_type: str | None = Field(default=None, sa_column=Column(String(200)))
    model_version: str = Field(sa_column=Column(String(200), nullable=False))
    agent: str = Field(sa_column=Column(String(255), nullable=False))
    agent_version: str = Field(sa_column=Column(String(50), nullable=False))
    seed: int | None = Field(default=None, sa_column=Column(BigInteger()))
    source: str = Field(sa_column=Column(String(50), nullable=False))
    status: str = Field(sa_column=Column(String(30), nullable=False))
    steps_planned: int = Field(sa_column=Column(Integer(), nullable=False))
    steps_done: int = Field(sa_column=Column(Integer(), nullable=False))
    failed_step: str | None = Field(default=None, sa_column=Column(String(255)))
    failed_step_index: int | None = Field(default=None, sa_column=Column(Integer()))
    error_type: str | None = Field(default=None, sa_column=Column(String(200)))
    failure_message: str | None = Field(default=None, sa_column=Column(Text()))
    signature: str | None = Field(default=None, sa_column=Column(String(64)))
    retries: int = Field(sa_column=Column(Integer(), nullable=False))
    tokens: int = Field(sa_column=Column(BigInteger(), nullable=False))
    cost_usd: float = Field(sa_column=Column(Float(), nullable=False))
    duration_s: float | None = Field(default=None, sa_column=Column(Float()))
    first_step_correct: bool | None = Field(default=None, sa_column=Column(Boolean()))
    mid_run_errors: int = Field(sa_column=Column(Integer(), nullable=False))
    mid_run_recovered: int = Field(sa_column=Column(Integer(), nullable=False))
    replay_of: str | None = Field(default=None, sa_column=Column(String(255)))
    forked_from: str | None = Field(default=None, sa_column=Column(String(255)))
    fork_step: int | None = Field(default=None, sa_column=Column(Integer()))
    session_id: str | None = Field(default=None, sa_column=Column(String(200)))
    """The session or conversation the run belongs to (runs of one session group together)."""
    incomplete: bool = Field(
        default=False, sa_column=Column(Boolean(), nullable=False, server_default=false())
    )
    """The run's source has known gaps (spans whose parent never arrived)."""
    started_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    ended_at: datetime | None = Field(default=None, sa_column=Column(DateTime(timezone=True)))
    last_position: int = Field(sa_column=Column(BigInteger(), nullable=False))


class FailureSignatureRow(SQLModel, table=True):
    """A failure mode: failed runs grouped by scenario, step, error type and message pattern."""

    __tablename__: ClassVar[str] = "failure_signatures"
    __table_args__ = (
        Index("ix_failure_signatures_scenario", "scenario"),
        Index("ix_failure_signatures_status", "status"),
    )

    signature: str = Field(sa_column=Column(String(64), primary_key=True))
    scenario: str = Field(sa_column=Column(String(200), nullable=False))
    step: str = Field(sa_column=Column(String(255), nullable=False))
    error_type: str = Field(sa_column=Column(String(200), nullable=False))
    message: str = Field(sa_column=Column(Text(), nullable=False))
    count: int = Field(sa_column=Column(Integer(), nullable=False))
    counts_by_version: dict[str, int] = Field(sa_column=Column(JSON(), nullable=False))
    first_seen_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    last_seen_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    first_position: int = Field(sa_column=Column(BigInteger(), nullable=False))
    last_position: int = Field(sa_column=Column(BigInteger(), nullable=False))
    exemplars: list[str] = Field(sa_column=Column(JSON(), nullable=False))
    labels: list[dict[str, Any]] = Field(sa_column=Column(JSON(), nullable=False))
    regression_sets: list[str] = Field(sa_column=Column(JSON(), nullable=False))
    status: str = Field(sa_column=Column(String(20), nullable=False))
    fixed_at_position: int | None = Field(default=None, sa_column=Column(BigInteger()))


class RegressionSetMemberRow(SQLModel, table=True):
    """A failed run promoted to a named regression set."""

    __tablename__: ClassVar[str] = "regression_set_members"

    set_name: str = Field(sa_column=Column(String(200), primary_key=True))
    run_id: str = Field(sa_column=Column(String(255), primary_key=True))
    signature: str | None = Field(default=None, sa_column=Column(String(64)))
    note: str | None = Field(default=None, sa_column=Column(Text()))
    added_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    position: int = Field(sa_column=Column(BigInteger(), nullable=False))


class ProjectionCheckpointRow(SQLModel, table=True):
    """How far each projection has read the log; written in the same transaction as its rows."""

    __tablename__: ClassVar[str] = "projection_checkpoints"

    name: str = Field(sa_column=Column(String(100), primary_key=True))
    position: int = Field(sa_column=Column(BigInteger(), nullable=False))
    updated_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))


run_summaries_table = RunSummaryRow.__table__  # type: ignore[attr-defined]
failure_signatures_table = FailureSignatureRow.__table__  # type: ignore[attr-defined]
regression_members_table = RegressionSetMemberRow.__table__  # type: ignore[attr-defined]
checkpoints_table = ProjectionCheckpointRow.__table__  # type: ignore[attr-defined]
metadata = SQLModel.metadata
