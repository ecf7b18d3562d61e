"""Run summaries say which run a rerun re-runs (``rerun_of``), so regression reruns stay out of
metrics, comparisons and the failure library like replays and forks.

Existing rows get NULL: runs recorded before reruns were linked carry no link.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("run_summaries") as batch:
        batch.add_column(sa.Column("rerun_of", sa.String(255), nullable=True))
    op.create_index("ix_run_summaries_rerun_of", "run_summaries", ["rerun_of"])


def downgrade() -> None:
    op.drop_index("ix_run_summaries_rerun_of", table_name="run_summaries")
    with op.batch_alter_table("run_summaries") as batch:
        batch.drop_column("rerun_of")
