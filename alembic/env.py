"""Alembic environment: steplog passes a connection; the alembic CLI gets a URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection
from sqlmodel import SQLModel

from steplog.models import include_in_autogenerate  # declares the tables on SQLModel.metadata
from steplog.store import WRITE_OPTION, create_engine_for, resolve_url

config = context.config


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=SQLModel.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=include_in_autogenerate,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=resolve_url(context.get_x_argument(as_dictionary=True).get("db")),
        target_metadata=SQLModel.metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    url = resolve_url(context.get_x_argument(as_dictionary=True).get("db"))
    engine = create_engine_for(url)
    with engine.connect() as conn:
        conn = conn.execution_options(**{WRITE_OPTION: True})
        run_migrations(conn)
        conn.commit()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
