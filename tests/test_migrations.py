"""Migrations: one head, reversible on both engines, and in sync with the table definitions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from helpers.children import reap, spawn
from sqlalchemy import Engine, inspect
from sqlmodel import SQLModel

from steplog.models import RunSummaryRow, include_in_autogenerate, metadata, run_summaries_table
from steplog.resources import migrations_dir
from steplog.store import create_engine_for, current_revision, downgrade, head_revision, upgrade
from steplog.store._migrations import _alembic_config


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_engine(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/m.db"
    else:
        url = request.getfixturevalue("pg_schemas").new(migrate=False)
    engine = create_engine_for(url)
    yield engine
    engine.dispose()


def test_single_head() -> None:
    script = ScriptDirectory.from_config(_alembic_config())
    assert len(script.get_heads()) == 1
    assert script.get_current_head() == head_revision()
    assert (migrations_dir() / "env.py").exists()


def _tables(engine: Engine) -> set[str]:
    """The tables, less Alembic's and the engine's own full-text index (SQLite's FTS5 table
    and its shadow tables: not declared in the models, see ``include_in_autogenerate``)."""
    names = set(inspect(engine).get_table_names()) - {"alembic_version"}
    return {name for name in names if include_in_autogenerate(name, "table", {})}


def test_upgrade_downgrade_upgrade(empty_engine: Engine) -> None:
    assert current_revision(empty_engine) is None
    upgrade(empty_engine)
    assert current_revision(empty_engine) == head_revision()
    assert _tables(empty_engine) == {
        "events", "quarantine", "run_summaries", "failure_signatures", "regression_set_members",
        "projection_checkpoints", "otlp_spans", "otlp_traces", "search_entries", "run_tags",
    }  # fmt: skip
    downgrade(empty_engine, "base")
    assert current_revision(empty_engine) is None
    assert _tables(empty_engine) == set()
    upgrade(empty_engine)
    assert current_revision(empty_engine) == head_revision()


def test_models_and_migrations_do_not_differ(empty_engine: Engine) -> None:
    upgrade(empty_engine)
    with empty_engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": include_in_autogenerate}
        )
        differences = compare_metadata(context, SQLModel.metadata)
    assert differences == []


def test_the_tables_are_the_sqlmodel_classes_tables() -> None:
    """One declaration: the Core tables the hot paths use are the SQLModel classes' tables."""
    assert metadata is SQLModel.metadata
    assert run_summaries_table is RunSummaryRow.__table__
    assert set(metadata.tables) == {
        "events", "quarantine", "run_summaries", "failure_signatures", "regression_set_members",
        "projection_checkpoints", "otlp_spans", "otlp_traces", "search_entries", "run_tags",
    }  # fmt: skip


def test_schema_head_constant_is_alembics_head() -> None:
    from steplog.store import SCHEMA_HEAD

    assert head_revision() == SCHEMA_HEAD


def test_processes_opening_a_new_sqlite_file_at_once_migrate_it_once(tmp_path: Path) -> None:
    """One process at a time migrates (a file lock), the others find the schema current."""
    import subprocess
    import sys

    for attempt in range(3):
        url = f"sqlite:///{tmp_path}/new-{attempt}.db"
        code = f"from steplog.store import EventStore; EventStore.open({url!r}).close()"
        processes = [
            spawn([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True) for _ in range(4)
        ]
        try:
            for process in processes:
                _, err = process.communicate(timeout=120)
                assert process.returncode == 0, err
        finally:
            for process in processes:
                reap(process)
        engine = create_engine_for(url)
        assert current_revision(engine) == head_revision()
        engine.dispose()
