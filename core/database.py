"""Engines, SQLite pragmas, database URLs and migrations: the storage edge of steplog.

The URL comes from ``--db``, else ``STEPLOG_DATABASE_URL``, else an embedded SQLite file under
``STEPLOG_HOME`` (default ``~/.steplog``). SQLite files are migrated to head on first use;
PostgreSQL is migrated explicitly with ``steplog db upgrade``.
"""

from __future__ import annotations

import math
import os
import random
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, OperationalError
from sqlalchemy.pool import ConnectionPoolEntry

if TYPE_CHECKING:  # alembic costs ~0.7 s to import: only commands that migrate pay for it
    from alembic.config import Config

from .errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseFullError,
    DatabaseLockedError,
    DatabaseReadOnlyError,
    DatabaseUnavailableError,
    SchemaNotCurrentError,
)
from .resources import migrations_dir

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
    return f"the SQLite database {_sqlite_file(url)}"


def _sqlite_file(url: URL) -> str:
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
        if not _foreign_tables(cursor):  # WAL is a lasting change: never on someone else's file
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


# --- migrations ------------------------------------------------------------------------------


SCHEMA_HEAD = "0009"
"""The newest migration, known without importing alembic (a test checks it is alembic's head)."""


def _alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest migration revision shipped with this steplog."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    if head is None:
        raise ConfigurationError("no migrations found")
    return head


def _is_known(revision: str) -> bool:
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    script = ScriptDirectory.from_config(_alembic_config())
    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None`` for an empty database)."""
    from alembic.runtime.migration import MigrationContext

    with connect_or_explain(engine) as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _recorded_revision(engine: Engine) -> str | None:
    """``alembic_version`` read with one plain query; ``None`` when the table is missing."""
    with connect_or_explain(engine) as conn:
        table = conn.dialect.has_table(conn, "alembic_version")
        if not table:
            return None
        rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
    return str(rows[0][0]) if len(rows) == 1 else None


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database up to ``revision``."""
    from alembic import command

    _migrate(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Migrate the database down to ``revision`` (``base`` drops every steplog table)."""
    from alembic import command

    _migrate(engine, command.downgrade, revision)


def _migrate(engine: Engine, step: Callable[[Config, str], None], revision: str) -> None:
    from alembic.util import CommandError

    with connect_or_explain(engine) as conn:
        conn = conn.execution_options(**{WRITE_OPTION: True})
        try:
            step(_alembic_config(conn), revision)
        except CommandError as exc:
            raise ConfigurationError(f"cannot migrate to {revision!r}: {exc}") from None
        conn.commit()


def _foreign_tables(cursor: Any) -> list[str]:
    """Tables of a SQLite file that is not (yet) a steplog database and is not empty: steplog
    must not alter such a file (a mistyped ``--db``)."""
    rows = cursor.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'"
    ).fetchall()
    names = sorted(str(row[0]) for row in rows)
    if not names or "events" in names:
        return []
    from .models import metadata

    return [name for name in names if name not in metadata.tables and name != "alembic_version"]


def _refuse_foreign(engine: Engine) -> None:
    """A SQLite file with tables of its own and no steplog schema is refused, not migrated."""
    if not is_sqlite(engine):
        return
    with connect_or_explain(engine) as conn:
        foreign = _foreign_tables(conn.connection.dbapi_connection)
    if foreign:
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        shown = ", ".join(foreign[:5]) + more
        raise ConfigurationError(
            f"{describe(engine)} is not a steplog database (it holds the table(s) {shown}); "
            "steplog leaves it unchanged: point --db at a new file or a steplog database"
        )


@contextmanager
def _sqlite_migration_lock(engine: Engine) -> Iterator[None]:
    """Let one process at a time migrate a SQLite file (an ``flock`` on ``<file>-migrate.lock``).

    Two commands opening a new file at once would otherwise both start migrating it, and the
    second would fail on a table the first has just created. Without a usable lock file (a
    read-only folder), migrating goes on alone and meets the folder's error with its message.
    """
    path = sqlite_path(engine.url.render_as_string(hide_password=False))
    if path is None:
        yield
        return
    import fcntl

    try:
        handle = path.with_name(f"{path.name}-migrate.lock").open("a")
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released when the file is closed
        yield


def ensure_schema(engine: Engine, *, auto_migrate: bool | None = None) -> None:
    """Make sure the schema is at head: migrate SQLite automatically, explain otherwise.

    A SQLite file that holds other tables and no steplog schema is refused unaltered."""
    recorded = _recorded_revision(engine)
    if recorded == SCHEMA_HEAD:
        return  # the common case, answered without importing alembic
    if recorded is None:
        _refuse_foreign(engine)
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
        with _sqlite_migration_lock(engine):
            if current_revision(engine) != head:  # not migrated meanwhile by another process
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
        if classify(exc) in ("busy", "full", "read_only", "corrupt"):
            raise explain(engine, exc) from None
        raise DatabaseError(f"cannot open {describe(engine)}: {_first_line(exc.orig)}") from None
    with conn:
        yield conn


# --- database failures -----------------------------------------------------------------------

Fault = Literal["transient", "busy", "full", "read_only", "cannot_open", "corrupt", "other"]
"""What kind of failure a driver error is: only ``transient`` and ``busy`` are worth a retry."""

_SQLITE_FAULTS: tuple[tuple[str, Fault], ...] = (
    ("SQLITE_BUSY", "busy"),  # another connection holds the lock (after the busy timeout)
    ("SQLITE_LOCKED", "busy"),
    ("SQLITE_PROTOCOL", "busy"),  # a WAL lock race; SQLite itself says: retry
    ("SQLITE_FULL", "full"),
    ("SQLITE_READONLY", "read_only"),
    ("SQLITE_PERM", "read_only"),
    ("SQLITE_CANTOPEN", "cannot_open"),
    ("SQLITE_CORRUPT", "corrupt"),
    ("SQLITE_NOTADB", "corrupt"),
)
_PG_TRANSIENT_STATES = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available
        "53300",  # too_many_connections
        "57P01",  # admin_shutdown (pg_terminate_backend, smart/fast shutdown)
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now (starting up, in recovery)
    }
)


def classify(exc: DBAPIError) -> Fault:
    """The kind of a database failure, from the driver's error code (never from its wording)."""
    if exc.connection_invalidated:
        return "transient"  # the connection is gone; SQLAlchemy has discarded it
    orig = exc.orig
    name = getattr(orig, "sqlite_errorname", None)
    if isinstance(name, str):
        return next((fault for prefix, fault in _SQLITE_FAULTS if name.startswith(prefix)), "other")
    state = getattr(orig, "sqlstate", None)
    if state == "53100":  # disk_full
        return "full"
    if state == "25006":  # read_only_sql_transaction: a hot standby, or a read-only session
        return "read_only"
    if isinstance(state, str) and (state in _PG_TRANSIENT_STATES or state.startswith("08")):
        return "transient"
    if state is None and isinstance(exc, OperationalError) and not isinstance(orig, sqlite3.Error):
        return "transient"  # psycopg: no server answer at all (refused, reset, timed out)
    return "other"


def explain(
    engine: Engine | None, exc: DBAPIError, *, attempts: int = 1, waited: float = 0.0
) -> DatabaseError:
    """The :class:`DatabaseError` a user sees for ``exc``: what failed, where, and what to do.

    Without ``engine`` (code that only has the exception, like the CLI's last-resort handler)
    the database is not named.
    """
    url = engine.url if engine is not None else None
    where = describe(engine) if engine is not None else "the database"
    reason = _first_line(exc.orig)
    fault = classify(exc)
    tried = f"{attempts} attempts over {waited:.1f} s" if attempts > 1 else "1 attempt"
    sqlite = url.get_backend_name() == "sqlite" if url else isinstance(exc.orig, sqlite3.Error)
    if fault == "busy":
        timeout = f"busy timeout {sqlite_busy_timeout(url):g} s; " if url else ""
        return DatabaseLockedError(
            f"{where} is locked: another connection holds its write lock ({timeout}{tried}). "
            "Finish or stop whatever holds it (a long transaction, an open sqlite3 shell), or "
            "wait longer with ?timeout=SECONDS in the database URL"
        )
    if fault == "transient":
        return DatabaseUnavailableError(
            f"{where} kept failing ({tried}): {reason}. Check that the server is up and "
            "reachable, then retry: re-sending the same events is safe, they are deduplicated "
            "by event id"
        )
    if fault == "full":
        return DatabaseFullError(
            f"{where} is full ({reason}): the write was not stored. Free disk space (or raise "
            "the database's size limit) and retry"
        )
    if fault == "read_only":
        if not sqlite:
            return DatabaseReadOnlyError(
                f"{where} is read-only ({reason}): connect to the primary server to write"
            )
        if url is not None and url.query.get("mode") == "ro":
            return DatabaseReadOnlyError(
                f"{where} is read-only ({reason}): its URL opens it with mode=ro; drop that to "
                "write to it"
            )
        folder, name = "", "FILE"
        if url is not None:
            file = Path(_sqlite_file(url))
            folder, name = f" {file.parent}", file.name
        return DatabaseReadOnlyError(
            f"{where} is read-only ({reason}): steplog needs write access to the file and to "
            f"its folder{folder} (SQLite creates {name}-wal and {name}-shm there); fix the "
            "permissions"
        )
    if fault == "cannot_open":
        return DatabaseError(
            f"cannot open {where} ({reason}): check that the file and its folder exist and "
            "that steplog may read and write them"
        )
    if fault == "corrupt":
        return DatabaseError(
            f"{where} is damaged or not a steplog database ({reason}); restore it from a "
            "backup (sqlite3's .recover command may salvage its events)"
        )
    return DatabaseError(f"{where} failed: {reason}")


def with_retries(engine: Engine, attempt: Callable[[], T], *, retries: int = 5) -> T:
    """``attempt()``, retried with backoff on transient failures; a clear error otherwise.

    ``attempt`` must be safe to repeat -- its own transaction, and writes that are idempotent
    (the event store's appends are: re-sent event ids are recognised) -- because a failure at
    COMMIT leaves it unknown whether the commit went through.

    Dropped connections and servers restarting are retried up to ``retries`` times (the engine
    reconnects: PostgreSQL pools pre-ping and are invalidated on disconnect); the first retry
    after a dropped connection is immediate, the next ones back off from 50 ms, doubling up to
    2 s, with jitter. A SQLite lock is already waited for by the busy timeout, so it is retried
    only while the time spent stays under that timeout (an immediate ``SQLITE_BUSY`` -- a WAL
    snapshot or recovery race -- is retried; a lock held past the timeout is reported).
    Anything else (a full disk, a read-only file) is reported at once, as a
    :class:`DatabaseError` that says what to do. Integrity errors propagate unchanged: they are
    answers, not failures.
    """
    delay = 0.05
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt()
        except IntegrityError:
            raise
        except DBAPIError as exc:
            fault = classify(exc)
            waited = time.monotonic() - started
            retry = attempts <= retries and (
                fault == "transient"
                or (
                    fault == "busy"
                    and is_sqlite(engine)
                    and waited < sqlite_busy_timeout(engine.url)
                )
            )
            if not retry:
                error = explain(engine, exc, attempts=attempts, waited=waited)
                raise error from (exc if fault == "other" else None)
            if attempts == 1 and exc.connection_invalidated:
                continue  # one dropped connection: the pool has a fresh one, retry now
        time.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, 2.0)


def _first_line(exc: BaseException | None) -> str:
    text = str(exc) if exc is not None else "unknown error"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
