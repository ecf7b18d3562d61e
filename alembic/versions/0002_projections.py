"""Read models of the projections: run summaries, failure signatures, regression sets.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_summaries",
        sa.Column("run_id", sa.String(255), primary_key=True),
        sa.Column("scenario", sa.String(200), nullable=False),
        sa.Column("task_instance_id", sa.String(255)),
        sa.Column("task_type", sa.String(200)),
        sa.Column("model_version", sa.String(200), nullable=False),
        sa.Column("agent", sa.String(255), nullable=False),
        sa.Column("agent_version", sa.String(50), nullable=False),
        sa.Column("seed", sa.BigInteger()),
        sa.Column("source", sa.String(50), nullable=False),
        sa.Column("status", sa.String(30), nullable=False),
        sa.Column("steps_planned", sa.Integer(), nullable=False),
        sa.Column("steps_done", sa.Integer(), nullable=False),
        sa.Column("failed_step", sa.String(255)),
        sa.Column("failed_step_index", sa.Integer()),
        sa.Column("error_type", sa.String(200)),
        sa.Column("failure_message", sa.Text()),
        sa.Column("signature", sa.String(64)),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("duration_s", sa.Float()),
        sa.Column("first_step_correct", sa.Boolean()),
        sa.Column("mid_run_errors", sa.Integer(), nullable=False),
        sa.Column("mid_run_recovered", sa.Integer(), nullable=False),
        sa.Column("replay_of", sa.String(255)),
        sa.Column("forked_from", sa.String(255)),
        sa.Column("fork_step", sa.Integer()),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
    )
    op.create_index(
        "ix_run_summaries_scenario_version", "run_summaries", ["scenario", "model_version"]
    )
    op.create_index("ix_run_summaries_status", "run_summaries", ["status"])
    op.create_index("ix_run_summaries_signature", "run_summaries", ["signature"])
    op.create_index("ix_run_summaries_started_at", "run_summaries", ["started_at"])
    op.create_index("ix_run_summaries_replay_of", "run_summaries", ["replay_of"])
    op.create_index("ix_run_summaries_forked_from", "run_summaries", ["forked_from"])
    op.create_table(
        "failure_signatures",
        sa.Column("signature", sa.String(64), primary_key=True),
        sa.Column("scenario", sa.String(200), nullable=False),
        sa.Column("step", sa.String(255), nullable=False),
        sa.Column("error_type", sa.String(200), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("counts_by_version", sa.JSON(), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("first_position", sa.BigInteger(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.Column("exemplars", sa.JSON(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("regression_sets", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("fixed_at_position", sa.BigInteger()),
    )
    op.create_index("ix_failure_signatures_scenario", "failure_signatures", ["scenario"])
    op.create_index("ix_failure_signatures_status", "failure_signatures", ["status"])
    op.create_table(
        "regression_set_members",
        sa.Column("set_name", sa.String(200), primary_key=True),
        sa.Column("run_id", sa.String(255), primary_key=True),
        sa.Column("signature", sa.String(64)),
        sa.Column("note", sa.Text()),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "projection_checkpoints",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("projection_checkpoints")
    op.drop_table("regression_set_members")
    op.drop_index("ix_failure_signatures_status", table_name="failure_signatures")
    op.drop_index("ix_failure_signatures_scenario", table_name="failure_signatures")
    op.drop_table("failure_signatures")
    for name in (
        "forked_from",
        "replay_of",
        "started_at",
        "signature",
        "status",
        "scenario_version",
    ):
        op.drop_index(f"ix_run_summaries_{name}", table_name="run_summaries")
    op.drop_table("run_summaries")
