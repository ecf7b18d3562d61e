"""Shared fixtures: one contract, two engines.

PostgreSQL comes from ``STEPLOG_TEST_PG_URL`` (default: the local server at 127.0.0.1:5432,
database ``test``). Each test session works in its own schema, dropped at the end. When the
server is unreachable the PostgreSQL tests are skipped on a developer machine and *fail* in CI
(``CI`` set), where PostgreSQL is part of the contract. The same rule holds for optional test
dependencies: ``pytest.importorskip`` skips on a developer machine and fails in CI
(helpers/ci_rules.py).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from helpers.ci_rules import pytest_make_collect_report, pytest_runtest_makereport
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from steplog.models import metadata
from steplog.store import EventStore, create_engine_for, normalize_url, upgrade, with_schema

__all__ = ["pytest_make_collect_report", "pytest_runtest_makereport"]  # hooks, registered here

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def pg_base_url() -> str:
    """The PostgreSQL server URL, or skip/fail as the module docstring says."""
    url = normalize_url(os.environ.get("STEPLOG_TEST_PG_URL", DEFAULT_PG_URL))
    engine = create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        message = f"PostgreSQL is not reachable at {url}: {str(exc.orig).strip()}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    finally:
        engine.dispose()
    return url


class SchemaFactory:
    """Creates PostgreSQL schemas for tests and drops them all at the end."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.admin = create_engine(base_url)
        self.created: list[str] = []

    def new(self, *, migrate: bool) -> str:
        schema = f"steplog_test_{uuid.uuid4().hex[:16]}"
        with self.admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        self.created.append(schema)
        url = with_schema(self.base_url, schema)
        if migrate:
            engine = create_engine_for(url)
            upgrade(engine)
            engine.dispose()
        return url

    def drop_all(self) -> None:
        with self.admin.begin() as conn:
            for schema in self.created:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        self.admin.dispose()


@pytest.fixture(scope="session")
def pg_schemas(pg_base_url: str) -> Iterator[SchemaFactory]:
    factory = SchemaFactory(pg_base_url)
    yield factory
    factory.drop_all()


@pytest.fixture(scope="session")
def pg_url(pg_schemas: SchemaFactory) -> str:
    """A migrated schema shared by the session; tests get it emptied (see ``store_url``)."""
    return pg_schemas.new(migrate=True)


def _truncate(url: str) -> None:
    engine = create_engine_for(url)
    with engine.begin() as conn:
        names = ", ".join(sorted(metadata.tables))
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY"))
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    """An empty, migrated store on each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    url: str = request.getfixturevalue("pg_url")
    _truncate(url)
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[EventStore]:
    opened = EventStore.open(store_url)
    yield opened
    opened.close()


@pytest.fixture
def steplog_home(tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """An isolated STEPLOG_HOME with no database URL in the environment."""
    home = f"{tmp_path}/home"
    monkeypatch.setenv("STEPLOG_HOME", home)
    monkeypatch.delenv("STEPLOG_DATABASE_URL", raising=False)
    return home
