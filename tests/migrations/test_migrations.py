"""The Alembic history: one head, reversible, and identical to the models (no drift)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.pool import NullPool

from registry.db import migrate
from registry.db.engine import make_engine
from registry.db.models import Base

TABLES = {"adapters", "adapter_versions", "lora_id_counter", "routing_gaps", "request_records"}


def _tables(url: str) -> set[str]:
    engine = make_engine(url, poolclass=NullPool)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_single_head() -> None:
    heads = ScriptDirectory.from_config(migrate.alembic_config()).get_heads()
    assert len(heads) == 1
    assert migrate.head_revision() == heads[0]


def test_upgrade_downgrade_upgrade(database_url: str) -> None:
    assert migrate.current_revision(database_url) is None
    assert not migrate.is_at_head(database_url)
    migrate.upgrade_to_head(database_url)
    assert migrate.is_at_head(database_url)
    assert _tables(database_url) == TABLES
    migrate.downgrade(database_url, "base")
    assert migrate.current_revision(database_url) is None
    assert _tables(database_url) == set()
    migrate.upgrade_to_head(database_url)
    assert migrate.current_revision(database_url) == migrate.head_revision()
    assert _tables(database_url) == TABLES


def test_counter_row_is_seeded(database_url: str) -> None:
    migrate.upgrade_to_head(database_url)
    engine = make_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT id, next_id FROM lora_id_counter")).all()
    finally:
        engine.dispose()
    assert [tuple(row) for row in rows] == [(1, 1)]


def test_no_drift_between_models_and_migrations(database_url: str) -> None:
    migrate.upgrade_to_head(database_url)
    engine = make_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()
