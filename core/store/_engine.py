"""Database URLs, engines and SQLite pragmas: where the store lives and how it is opened.

The URL comes from ``--db``, else ``STEPLOG_DATABASE_URL``, else an embedded SQLite file under
``STEPLOG_HOME`` (default ``~/.steplog``).
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import ConnectionPoolEntry

if TYPE_CHECKING:  # alembic costs ~0.7 s to import: only commands that migrate pay for it
    pass

from ..errors import (
    ConfigurationError,
)

T = TypeVar("T")
ENV_DATABASE_URL = "STEPLOG_DATABASE_URL"
ENV_HOME = "STEPLOG_HOME"
DEFAULT_DB_FILE = "steplog.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite connection waits for another's write lock; ``?timeout=SECONDS`` in the
URL changes it."""
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


def without_create(url: str) -> str:
    """A SQLite URL whose connections open the file read-write but never create it
    (``file:...?mode=rw``): a file removed while a store is open is not re-created empty."""
    path = sqlite_path(url)
    if path is None:
        return url
    parsed = make_url(url)
    query = {**parsed.query, "mode": "rw", "uri": "true"}
    database = "file:" + quote(str(path.resolve()))
    return parsed.set(database=database, query=query).render_as_string(hide_password=False)


def sqlite_busy_timeout(url: str | URL) -> float:
    """Seconds a SQLite connection waits for another connection's write lock.

    ``?timeout=SECONDS`` in the URL (the parameter Python's ``sqlite3.connect`` takes), else
    ``SQLITE_BUSY_TIMEOUT_MS``.
    """
    parsed = make_url(url) if isinstance(url, str) else url
    raw = parsed.query.get("timeout")
    if raw is None:
        return SQLITE_BUSY_TIMEOUT_MS / 1000
    text = raw[-1] if isinstance(raw, tuple) else raw
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 86_400:
        raise ConfigurationError(
            f"timeout={text!r} in the SQLite URL must be a number of seconds from 0 to 86400"
        )
    return value


def describe(engine: Engine) -> str:
    """How messages name the database: ``the SQLite database /path`` or ``the database URL``."""
    url = engine.url
    if url.get_backend_name() != "sqlite":
        return f"the database {redact(url.render_as_string(hide_password=False))}"
    return f"the SQLite database {sqlite_file(url)}"


def sqlite_file(url: URL) -> str:
    """The file a SQLite URL names, also for ``file:`` URIs (``sqlite:///file:x.db?mode=ro``)."""
    database = url.database or ":memory:"
    if database.startswith("file:"):
        database = database[len("file:") :].split("?", 1)[0]
    return database


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
        timeout = sqlite_busy_timeout(sa_url)
        engine = create_engine(sa_url, connect_args={"timeout": timeout})
        _install_sqlite_hooks(engine, timeout)
        return engine
    # Pre-ping: a pooled connection the server dropped (restart, pg_terminate_backend, idle
    # timeout) is replaced at checkout. A disconnect seen mid-statement invalidates the whole
    # pool (SQLAlchemy does that), so the next attempt starts on fresh connections.
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("pool_size", _pool_setting("STEPLOG_POOL_SIZE", 5))
    kwargs.setdefault("max_overflow", _pool_setting("STEPLOG_POOL_OVERFLOW", 10))
    return create_engine(sa_url, connect_args={"connect_timeout": 10}, **kwargs)


def _pool_setting(name: str, default: int) -> int:
    """A PostgreSQL connection-pool size from the environment, checked."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    if not raw.strip().isdigit():
        raise ConfigurationError(f"{name} must be a whole number of connections, not {raw!r}")
    return int(raw)


def _install_sqlite_hooks(engine: Engine, timeout: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        dbapi_connection.isolation_level = None  # steplog emits BEGIN itself, see below
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {round(timeout * 1000):d}")
        if not foreign_tables(cursor):  # WAL is a lasting change: never on someone else's file
            with suppress(sqlite3.OperationalError):  # a read-only file is still read
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


def prefer_index_scans(conn: Connection, *, in_order: bool = False) -> None:
    """For the rest of ``conn``'s transaction (PostgreSQL; SQLite needs no hint): look rows up
    by index even when the planner would rather scan the table; ``in_order``: walk the index in
    its order (a page of keys: ``ORDER BY`` the key and ``LIMIT``), never collect and sort.

    For the OTLP staging tables, queues that fill and drain within seconds: their statistics
    (autovacuum's, a minute late at best) describe a table of another size, or none yet, and
    ``trace_id IN (200 ids)`` without them is estimated to match every row, so the claim and the
    reads of a round were planned as scans of the whole backlog -- slower the further behind
    the assemblers are."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        if in_order:
            conn.exec_driver_sql("SET LOCAL enable_bitmapscan = off")


def foreign_tables(cursor: Any) -> list[str]:
    """Tables of a SQLite file that is not (yet) a steplog database and is not empty: steplog
    must not alter such a file (a mistyped ``--db``)."""
    rows = cursor.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'"
    ).fetchall()
    names = sorted(str(row[0]) for row in rows)
    if not names or "events" in names:
        return []
    from ..models import metadata

    return [name for name in names if name not in metadata.tables and name != "alembic_version"]
