"""Engines, SQLite pragmas, database URLs and migrations: the storage edge of steplog.

The URL comes from ``--db``, else ``STEPLOG_DATABASE_URL``, else an embedded SQLite file under
``STEPLOG_HOME`` (default ``~/.steplog``). SQLite files are migrated to head on first use;
PostgreSQL is migrated explicitly with ``steplog db upgrade``.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.pool import ConnectionPoolEntry

from .errors import ConfigurationError, DatabaseError, SchemaNotCurrentError

ENV_DATABASE_URL = "STEPLOG_DATABASE_URL"
ENV_HOME = "STEPLOG_HOME"
DEFAULT_DB_FILE = "steplog.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "alembic"
WRITE_OPTION = "steplog_write"
"""Execution option: a connection that will write starts its SQLite transaction IMMEDIATE."""


def steplog_home() -> Path:
    """The folder holding the default embedded database."""
    home = os.environ.get(ENV_HOME)
    return Path(home).expanduser() if home else Path.home() / ".steplog"


def resolve_url(db: str | None = None) -> str:
    """The database URL to use: ``db``, else the environment, else the embedded default."""
    raw = db or os.environ.get(ENV_DATABASE_URL) or ""
    if not raw.strip():
        return f"sqlite:///{steplog_home() / DEFAULT_DB_FILE}"
    return normalize_url(raw.strip())


SUPPORTED_DRIVERS = {"sqlite": ("pysqlite",), "postgresql": ("psycopg",)}


def normalize_url(raw: str) -> str:
    """Accept plain file paths and ``postgresql://`` URLs; pin PostgreSQL to psycopg 3."""
    if "://" not in raw:
        return f"sqlite:///{Path(raw).expanduser().resolve()}"
    for prefix in ("postgres://", "postgresql://"):
        if raw.startswith(prefix):
            raw = "postgresql+psycopg://" + raw[len(prefix) :]
    try:
        url = make_url(raw)
        _ = url.port  # a malformed port only fails when read
    except (ArgumentError, ValueError) as exc:
        raise ConfigurationError(f"not a database URL: {redact(raw)!r} ({exc})") from None
    backend = url.get_backend_name()
    if backend not in SUPPORTED_DRIVERS:
        raise ConfigurationError(
            f"unsupported database {backend!r} in {redact(raw)!r}: "
            "steplog runs on SQLite (sqlite:///path) and PostgreSQL (postgresql://...)"
        )
    if url.get_driver_name() not in SUPPORTED_DRIVERS[backend]:
        raise ConfigurationError(
            f"unsupported driver {url.get_driver_name()!r} in {redact(raw)!r}: use "
            + ("sqlite:///path" if backend == "sqlite" else "postgresql://... (psycopg 3)")
        )
    return raw


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (``None`` for other engines and in-memory databases)."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    return None if database.startswith("file:") else Path(database).expanduser()


def with_schema(url: str, schema: str) -> str:
    """A PostgreSQL URL whose connections use ``schema`` (tests and benchmarks isolate this way)."""
    if not schema.replace("_", "").isalnum():
        raise ConfigurationError(f"schema name {schema!r} must be letters, digits and '_'")
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csearch_path%3D{schema}"


def redact(url: str) -> str:
    """The URL with its password hidden, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return re.sub(r"://([^:/@]*):[^@]*@", r"://\1:***@", url)


def is_sqlite(engine: Engine | Connection) -> bool:
    """Whether ``engine`` talks to SQLite."""
    return engine.dialect.name == "sqlite"


def create_engine_for(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` with steplog's connection settings.

    SQLite: WAL journal, ``synchronous=FULL`` (a commit is durable when it returns), a busy
    timeout, and transactions steplog begins itself (``BEGIN IMMEDIATE`` for writers).
    PostgreSQL: psycopg 3 and pre-ping; a schema can be chosen in the URL itself with
    ``?options=-csearch_path%3Dmyschema`` (tests and benchmarks use that).
    """
    sa_url = make_url(url)
    if sa_url.get_backend_name() == "sqlite":
        database = sa_url.database
        if database and database != ":memory:" and not database.startswith("file:"):
            folder = Path(database).expanduser().parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigurationError(
                    f"cannot create the folder {folder} for the SQLite database: {exc.strerror}"
                ) from None
        engine = create_engine(sa_url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        _install_sqlite_hooks(engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(sa_url, connect_args={"connect_timeout": 10}, **kwargs)


def _install_sqlite_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        dbapi_connection.isolation_level = None  # steplog emits BEGIN itself, see below
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        writes = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that will write: on SQLite it takes the write lock up front."""
    with engine.connect() as conn:
        conn = conn.execution_options(**{WRITE_OPTION: True})
        with conn.begin():
            yield conn


# --- migrations ------------------------------------------------------------------------------


def _alembic_config(connection: Connection | None = None) -> Config:
    if not (MIGRATIONS_DIR / "env.py").exists():
        raise ConfigurationError(
            f"migrations not found at {MIGRATIONS_DIR}; install steplog from its source tree "
            "(pip install -e .)"
        )
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest migration revision shipped with this steplog."""
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    if head is None:
        raise ConfigurationError("no migrations found")
    return head


def _is_known(revision: str) -> bool:
    script = ScriptDirectory.from_config(_alembic_config())
    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` for an empty database)."""
    with connect_or_explain(engine) as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database up to ``revision``."""
    _migrate(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Migrate the database down to ``revision`` (``base`` drops every steplog table)."""
    _migrate(engine, command.downgrade, revision)


def _migrate(engine: Engine, step: Callable[[Config, str], None], revision: str) -> None:
    with connect_or_explain(engine) as conn:
        conn = conn.execution_options(**{WRITE_OPTION: True})
        try:
            step(_alembic_config(conn), revision)
        except CommandError as exc:
            raise ConfigurationError(f"cannot migrate to {revision!r}: {exc}") from None
        conn.commit()


def ensure_schema(engine: Engine, *, auto_migrate: bool | None = None) -> None:
    """Make sure the schema is at head: migrate SQLite automatically, explain otherwise."""
    current = current_revision(engine)
    head = head_revision()
    if current == head:
        return
    if current is not None and not _is_known(current):
        raise SchemaNotCurrentError(
            f"the database {redact(engine.url.render_as_string(False))} is at revision "
            f"{current}, which this steplog does not know (its newest is {head}): the database "
            "was migrated by a newer steplog; upgrade steplog"
        )
    migrate = is_sqlite(engine) if auto_migrate is None else auto_migrate
    if migrate:
        upgrade(engine)
        return
    where = redact(engine.url.render_as_string(hide_password=False))
    state = "is empty" if current is None else f"is at revision {current}"
    raise SchemaNotCurrentError(
        f"the database {where} {state}, but this steplog needs revision {head}; "
        f"run: steplog db upgrade --db '{where}'"
    )


@contextmanager
def connect_or_explain(engine: Engine) -> Iterator[Connection]:
    """``engine.connect()`` that turns connection failures into a clear :class:`DatabaseError`."""
    try:
        conn = engine.connect()
    except OperationalError as exc:
        raise DatabaseError(
            f"cannot open the database {redact(engine.url.render_as_string(False))}: "
            f"{_first_line(exc.orig)}"
        ) from None
    with conn:
        yield conn


def _first_line(exc: BaseException | None) -> str:
    text = str(exc) if exc is not None else "unknown error"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
