"""Raw spans are kept after assembly, compressed, so runs can be revised and re-mapped; run
summaries show a run's session and whether its source had known gaps.

Until now a trace's spans were deleted once it became a run: a span arriving later could only be
quarantined, and an improved mapping could not be applied to stored traces. ``otlp_traces``
keeps every span of an assembled trace (zlib-compressed JSON); late spans merge into it and
``steplog reassemble`` maps it again.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "otlp_traces",
        sa.Column("trace_id", sa.String(32), primary_key=True),
        sa.Column("run_id", sa.String(255), nullable=False),
        sa.Column("span_count", sa.Integer(), nullable=False),
        sa.Column("spans", sa.LargeBinary(), nullable=False),
        sa.Column("assembled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("run_summaries") as batch:
        batch.add_column(sa.Column("session_id", sa.String(200), nullable=True))
        batch.add_column(
            sa.Column("incomplete", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.create_index("ix_run_summaries_session", "run_summaries", ["session_id", "started_at"])


def downgrade() -> None:
    op.drop_index("ix_run_summaries_session", table_name="run_summaries")
    with op.batch_alter_table("run_summaries") as batch:
        batch.drop_column("incomplete")
        batch.drop_column("session_id")
    op.drop_table("otlp_traces")
