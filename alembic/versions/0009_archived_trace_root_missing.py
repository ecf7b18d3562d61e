"""Archived traces say whether their root span has come (``root_missing``): a run assembled
without its root (under a synthetic root) waits for it, so late spans of such a trace are taken
after a quiet period rather than at once (one revision per pause of a run still under way, not
one per export).

Existing rows get false: traces archived before were assembled as if their root had come.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("otlp_traces") as batch:
        batch.add_column(
            sa.Column("root_missing", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("otlp_traces") as batch:
        batch.drop_column("root_missing")
