"""EventStore.open_existing: what viewers use; it creates and migrates nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text

from steplog.errors import ConfigurationError, SchemaNotCurrentError
from steplog.store import EventStore, create_engine_for, current_revision


def test_a_missing_sqlite_file_is_refused_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nested" / "typo.db"
    with pytest.raises(ConfigurationError, match="there is no steplog database at"):
        EventStore.open_existing(f"sqlite:///{missing}")
    assert not missing.exists() and not missing.parent.exists()


def test_an_unmigrated_database_is_refused_unaltered(
    tmp_path: Path, request: pytest.FixtureRequest, store_url: str
) -> None:
    if store_url.startswith("sqlite"):
        sqlite3.connect(tmp_path / "bare.db").close()
        url = f"sqlite:///{tmp_path}/bare.db"
    else:
        url = request.getfixturevalue("pg_schemas").new(migrate=False)
    with pytest.raises(SchemaNotCurrentError, match=r"is empty.*steplog db upgrade") as caught:
        EventStore.open_existing(url)
    assert "mode=rw" not in str(caught.value)  # named as the user wrote it
    engine = create_engine_for(url)
    assert current_revision(engine) is None
    engine.dispose()


def test_an_existing_store_opens_and_a_removed_file_is_not_recreated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    EventStore.open(url).close()
    store = EventStore.open_existing(url)
    assert store.last_position() == 0
    store.engine.dispose()  # no pooled connection to the old file is left
    (tmp_path / "store.db").unlink()
    with (
        pytest.raises(Exception, match="unable to open database file"),
        store.engine.connect() as conn,
    ):
        conn.execute(text("SELECT 1"))
    assert not (tmp_path / "store.db").exists()
    store.close()


def test_an_existing_store_opens_on_each_engine(store_url: str) -> None:
    EventStore.open(store_url).close()
    store = EventStore.open_existing(store_url)
    assert store.last_position() == 0
    store.close()
