"""Alembic environment of the adapter registry.

Used programmatically by ``registry.db.migrate`` (which passes an open connection in
``config.attributes["connection"]``) and by the ``alembic`` CLI with ``migrations/alembic.ini``
(the URL then comes from ``-x url=...``, ``sqlalchemy.url`` or ``HI_MOE_LORA_DATABASE_URL``).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection
from sqlalchemy.pool import NullPool

from registry.db.engine import make_engine
from registry.db.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url")
    if url:
        return url
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from registry.settings import ControlPlaneSettings

    return ControlPlaneSettings().database_url


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        compare_type=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(_url(), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            _configure(connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
