"""Event store: the append-only events table and the quarantine for rejected input.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from steplog.models import JSONPayload, PositionType

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", PositionType, primary_key=True, autoincrement=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(100), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload", JSONPayload(), nullable=False),
        sa.UniqueConstraint("run_id", "seq", name="uq_events_run_id_seq"),
        sa.UniqueConstraint("event_id", name="uq_events_event_id"),
    )
    op.create_table(
        "quarantine",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(500), nullable=False),
        sa.Column("location", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("raw", sa.Text(), nullable=False),
    )
    op.create_index("ix_quarantine_source", "quarantine", ["source"])


def downgrade() -> None:
    op.drop_index("ix_quarantine_source", table_name="quarantine")
    op.drop_table("quarantine")
    op.drop_table("events")
