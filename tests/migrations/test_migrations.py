"""The Alembic history: one head, reversible, and identical to the models (no drift)."""

from __future__ import annotations

import json

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.pool import NullPool

from registry.db import migrate
from registry.db.engine import make_engine
from registry.db.models import Base

TABLES = {
    "adapters",
    "adapter_versions",
    "lora_id_counter",
    "routing_gaps",
    "request_records",
    "access_tokens",
    "audit_events",
}


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


def test_0002_keeps_existing_adapters_and_gaps(database_url: str) -> None:
    migrate.upgrade(database_url, "0001_initial")
    engine = make_engine(database_url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO adapters (id, name, created_at) "
                    "VALUES (1, 'old-lora', '2026-11-01 00:00:00+00')"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO routing_gaps (created_at, task_excerpt, extracted_domains, reason)"
                    " VALUES ('2026-11-01 00:00:00+00', 'a task', '[]', 'no match')"
                )
            )
        migrate.upgrade_to_head(database_url)
        with engine.connect() as connection:
            hints = connection.execute(
                text("SELECT dispatch_keywords, dispatch_exemplars FROM adapters")
            ).one()
            gap = connection.execute(text("SELECT terms, tier_scores FROM routing_gaps")).one()
    finally:
        engine.dispose()
    assert [json.loads(v) if isinstance(v, str) else v for v in hints] == [[], []]
    assert [json.loads(v) if isinstance(v, str) else v for v in gap] == [[], {}]
