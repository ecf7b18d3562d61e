"""Database selection, engine settings and first-use migration."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from steplog.errors import ConfigurationError, DatabaseError, SchemaNotCurrentError
from steplog.store import (
    EventStore,
    create_engine_for,
    current_revision,
    ensure_schema,
    head_revision,
    normalize_url,
    redact,
    resolve_url,
)


def test_default_is_sqlite_under_steplog_home(steplog_home: str) -> None:
    assert resolve_url() == f"sqlite:///{steplog_home}/steplog.db"


def test_default_without_steplog_home_is_in_the_user_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("STEPLOG_HOME", raising=False)
    monkeypatch.delenv("STEPLOG_DATABASE_URL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_url() == f"sqlite:///{tmp_path}/.steplog/steplog.db"


def test_option_beats_environment_beats_default(
    steplog_home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPLOG_DATABASE_URL", "sqlite:////tmp/env.db")
    assert resolve_url() == "sqlite:////tmp/env.db"
    assert resolve_url("sqlite:////tmp/opt.db") == "sqlite:////tmp/opt.db"


def test_plain_paths_and_postgres_urls_are_normalized(tmp_path: Path) -> None:
    assert normalize_url(str(tmp_path / "x.db")) == f"sqlite:///{tmp_path}/x.db"
    assert normalize_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"


def test_unsupported_backends_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="unsupported database 'mysql'"):
        normalize_url("mysql://root@localhost/test")


def test_passwords_are_hidden_in_messages() -> None:
    assert "s3cret" not in redact("postgresql+psycopg://u:s3cret@h/db")


def test_sqlite_pragmas_make_commits_durable(tmp_path: Path) -> None:
    engine = create_engine_for(f"sqlite:///{tmp_path}/p.db")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 2  # FULL
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30_000
    engine.dispose()


def test_new_sqlite_file_is_created_and_migrated(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "folder" / "new.db"
    store = EventStore.open(str(path))
    store.close()
    assert path.exists()
    engine = create_engine_for(f"sqlite:///{path}")
    assert current_revision(engine) == head_revision()
    engine.dispose()


@pytest.mark.postgres
def test_postgres_is_not_migrated_behind_your_back(pg_schemas: object) -> None:
    url = pg_schemas.new(migrate=False)  # type: ignore[attr-defined]
    with pytest.raises(SchemaNotCurrentError, match=r"is empty.*steplog db upgrade"):
        EventStore.open(url)
    engine = create_engine_for(url)
    ensure_schema(engine, auto_migrate=True)
    assert current_revision(engine) == head_revision()
    engine.dispose()
    EventStore.open(url).close()


def test_unreachable_database_is_a_clear_error() -> None:
    with pytest.raises(DatabaseError, match=r"cannot open the database .*127\.0\.0\.1:1"):
        EventStore.open("postgresql://nobody:pw@127.0.0.1:1/none")


def test_unwritable_sqlite_location_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigurationError, match="cannot create the folder"):
        EventStore.open(str(blocker / "store.db"))


def test_pool_sizes_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from steplog.errors import ConfigurationError
    from steplog.store import create_engine_for

    monkeypatch.setenv("STEPLOG_POOL_SIZE", "12")
    monkeypatch.setenv("STEPLOG_POOL_OVERFLOW", "3")
    engine = create_engine_for("postgresql+psycopg://postgres@127.0.0.1:5432/test")
    assert (engine.pool.size(), engine.pool._max_overflow) == (12, 3)  # type: ignore[attr-defined]
    engine.dispose()
    monkeypatch.setenv("STEPLOG_POOL_SIZE", "lots")
    with pytest.raises(ConfigurationError, match="STEPLOG_POOL_SIZE must be a whole number"):
        create_engine_for("postgresql+psycopg://postgres@127.0.0.1:5432/test")
