"""Search across runs: the ``search`` projection's tables and each engine's full-text index.

``search_entries`` holds one row per searchable text of a run (input, outputs, errors, tool
arguments and results, model requests and responses); ``run_tags`` a run's metadata as
``key = value`` pairs. The full-text index is engine-specific, so it is created here and left
out of the model/migration comparison (``steplog.models.include_in_autogenerate``):

- SQLite: the FTS5 table ``search_fts`` with ``search_entries`` as its external content (the
  text is stored once; the projection adds each new row's text to the index);
- PostgreSQL: ``search_tsv``, a stored generated ``tsvector`` of the text with every run of
  characters that are not letters or digits made a space (so both engines split words alike:
  ``spot_check`` and ``example.com`` are two words on both), and a GIN index on it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "search_entries",
        sa.Column("id", _ID, primary_key=True, nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=30), nullable=False),
        sa.Column("step", sa.String(length=255), nullable=True),
        sa.Column("step_index", sa.Integer(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
    )
    op.create_index("ix_search_entries_run_id", "search_entries", ["run_id", "position"])
    op.create_table(
        "run_tags",
        sa.Column("run_id", sa.String(length=255), primary_key=True, nullable=False),
        sa.Column("key", sa.String(length=200), primary_key=True, nullable=False),
        sa.Column("value", sa.String(length=500), nullable=False),
    )
    op.create_index("ix_run_tags_key_value", "run_tags", ["key", "value"])
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE search_fts USING fts5("
            "text, content='search_entries', content_rowid='id')"
        )
    else:
        op.execute(
            "ALTER TABLE search_entries ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS "
            "(to_tsvector('simple'::regconfig, "
            "regexp_replace(text, '[^[:alnum:]]+', ' ', 'g'))) STORED"
        )
        op.execute("CREATE INDEX ix_search_entries_tsv ON search_entries USING gin (search_tsv)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS search_fts")
    op.drop_index("ix_run_tags_key_value", table_name="run_tags")
    op.drop_table("run_tags")
    op.drop_index("ix_search_entries_run_id", table_name="search_entries")
    op.drop_table("search_entries")
