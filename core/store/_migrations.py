"""The schema and its migrations (Alembic): SQLite files are migrated to head on first use;
PostgreSQL is migrated explicitly with ``steplog db upgrade``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine

if TYPE_CHECKING:  # alembic costs ~0.7 s to import: only commands that migrate pay for it
    from alembic.config import Config

from ..errors import (
    ConfigurationError,
    SchemaNotCurrentError,
)
from ..resources import migrations_dir
from ._engine import WRITE_OPTION, describe, foreign_tables, is_sqlite, redact, sqlite_path
from ._faults import connect_or_explain

SCHEMA_HEAD = "0010"
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


def _refuse_foreign(engine: Engine) -> None:
    """A SQLite file with tables of its own and no steplog schema is refused, not migrated."""
    if not is_sqlite(engine):
        return
    with connect_or_explain(engine) as conn:
        foreign = foreign_tables(conn.connection.dbapi_connection)
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
