"""Alembic, driven from code: upgrade to head, read the current revision, compare with head.

The Alembic environment lives in the ``migrations`` package; these helpers hand it an open
connection (``config.attributes["connection"]``) so no ``alembic.ini`` or URL escaping is needed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine
from sqlalchemy.pool import NullPool

import migrations
from registry.db.engine import make_engine

logger = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str:
    """The single head revision; raises if the history has several heads."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError("the migration history is empty")
    return head


def _engine(url: str) -> Engine:
    return make_engine(url, poolclass=NullPool)


def _run_alembic(url: str, action: Callable[[Config, str], None], revision: str) -> None:
    """Run an Alembic command on one connection, inside one transaction."""
    engine = _engine(url)
    try:
        with engine.begin() as connection:
            config = alembic_config()
            config.attributes["connection"] = connection
            action(config, revision)
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    _run_alembic(url, command.upgrade, revision)
    logger.info("database upgraded to %s", revision)


def downgrade(url: str, revision: str) -> None:
    _run_alembic(url, command.downgrade, revision)
    logger.info("database downgraded to %s", revision)


def upgrade_to_head(url: str) -> None:
    upgrade(url, "head")


def current_revision_of(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def current_revision(url: str) -> str | None:
    engine = _engine(url)
    try:
        return current_revision_of(engine)
    finally:
        engine.dispose()


def is_at_head(url: str) -> bool:
    return current_revision(url) == head_revision()
