"""The tables the library projection writes -- the live read models or their rebuild shadows --
and how a page of run summaries goes into them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Connection, MetaData, Table

from ..models import failure_signatures_table, regression_members_table, run_summaries_table
from ..store import is_sqlite, sqlite_datetime
from .tally import SUMMARY_COLUMNS, RunTally


@dataclass(frozen=True, slots=True)
class LibraryTables:
    """The tables one fold writes: the live read models or their rebuild shadows."""

    runs: Table
    signatures: Table
    members: Table

    @classmethod
    def shadow(cls) -> LibraryTables:
        """Copies of the live tables (columns and keys, no secondary indexes)."""
        metadata = MetaData()

        def copy(table: Table) -> Table:
            columns: list[Column[Any]] = [column._copy() for column in table.columns]
            for column in columns:
                column.index = None
            return Table(f"{table.name}__rebuild", metadata, *columns)

        return cls(
            copy(run_summaries_table),
            copy(failure_signatures_table),
            copy(regression_members_table),
        )

    def all(self) -> tuple[Table, Table, Table]:
        """The three tables."""
        return (self.runs, self.signatures, self.members)


LIVE = LibraryTables(run_summaries_table, failure_signatures_table, regression_members_table)


def insert_summaries(conn: Connection, table: Table, runs: Iterable[RunTally]) -> None:
    """``INSERT`` the summaries of ``runs`` through the driver's ``executemany``: a page writes
    thousands of summaries and SQLAlchemy's per-row parameter processing cost more than folding
    them. Times are bound as SQLAlchemy binds them (text on SQLite); every other value as it is."""
    if is_sqlite(conn):
        rows, marks = [run.summary_values(sqlite_datetime) for run in runs], "?"
    else:
        rows, marks = [run.summary_values() for run in runs], "%s"
    conn.exec_driver_sql(
        f"INSERT INTO {table.name} ({', '.join(SUMMARY_COLUMNS)}) "
        f"VALUES ({', '.join([marks] * len(SUMMARY_COLUMNS))})",
        rows,
    )
