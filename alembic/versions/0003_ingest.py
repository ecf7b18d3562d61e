"""Ingest: staged OTLP spans waiting for their trace, and resolved quarantine records.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "otlp_spans",
        sa.Column("trace_id", sa.String(32), primary_key=True),
        sa.Column("span_id", sa.String(16), primary_key=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("is_root", sa.Boolean(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
    )
    op.create_index("ix_otlp_spans_received_at", "otlp_spans", ["received_at"])
    with op.batch_alter_table("quarantine") as batch:
        batch.add_column(sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("resolution", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("quarantine") as batch:
        batch.drop_column("resolution")
        batch.drop_column("resolved_at")
    op.drop_index("ix_otlp_spans_received_at", table_name="otlp_spans")
    op.drop_table("otlp_spans")
