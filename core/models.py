"""Tables of the event store. The schema changes only through Alembic migrations."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import BigInteger, Column, DateTime, Integer, String, Text, UniqueConstraint, Uuid
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
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


events_table = StoredEventRow.__table__  # type: ignore[attr-defined]
quarantine_table = QuarantinedRecord.__table__  # type: ignore[attr-defined]
metadata = SQLModel.metadata
