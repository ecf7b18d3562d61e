"""Bytes on disk per table of a store, grouped the way the ingest benchmark reports them.

SQLite: the ``dbstat`` virtual table (pages of each table and of its indexes, the file's own
accounting). PostgreSQL: ``pg_total_relation_size`` of each table of the store's schema (heap,
TOAST and indexes). Groups: the span **archive**, the **events**, **staging** (spans waiting
for assembly), **quarantine**, and the **read models** (every other table).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import text

from ..store import create_engine_for

GROUPS: Final = {
    "otlp_traces": "archive",
    "events": "events",
    "otlp_spans": "staging",
    "quarantine": "quarantine",
}
"""Table -> group; any table not named here is a read model (or bookkeeping such as
``alembic_version``, too small to matter)."""

_SQLITE_SIZES: Final = """
SELECT coalesce(m.tbl_name, s.name) AS owner, sum(s.pgsize) AS bytes
FROM dbstat AS s LEFT JOIN sqlite_master AS m ON m.name = s.name
GROUP BY owner
"""
_PG_SIZES: Final = """
SELECT c.relname, pg_total_relation_size(c.oid)
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
"""


def table_bytes(url: str) -> dict[str, int]:
    """``{table: bytes on disk}`` of the store at ``url``, indexes counted with their table."""
    engine = create_engine_for(url)
    try:
        with engine.connect() as conn:
            sql = _PG_SIZES if engine.dialect.name == "postgresql" else _SQLITE_SIZES
            return {str(name): int(size or 0) for name, size in conn.execute(text(sql))}
    finally:
        engine.dispose()


def grouped(sizes: dict[str, int]) -> dict[str, int]:
    """``sizes`` summed by group (:data:`GROUPS`), every group present."""
    found = dict.fromkeys(("archive", "events", "read models", "staging", "quarantine"), 0)
    for table, size in sizes.items():
        if table.startswith("sqlite_"):
            continue  # SQLite's own schema pages
        found[GROUPS.get(table, "read models")] += size
    return found


__all__ = ["GROUPS", "grouped", "table_bytes"]
