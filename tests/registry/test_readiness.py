"""Readiness of the registry's database: at head, behind, or unreachable."""

from __future__ import annotations

import pytest

from registry.db import migrate
from registry.db.engine import make_engine
from registry.db.session import Database
from registry.errors import SchemaNotAtHeadError, ServiceUnavailableError
from registry.operations.readiness import require_schema_at_head


async def test_at_head_answers_the_revision(migrated_url: str) -> None:
    database = Database(make_engine(migrated_url))
    try:
        assert await require_schema_at_head(database) == migrate.head_revision()
    finally:
        database.dispose()


async def test_empty_database_is_not_ready(database_url: str) -> None:
    database = Database(make_engine(database_url))
    try:
        with pytest.raises(SchemaNotAtHeadError):
            await require_schema_at_head(database)
    finally:
        database.dispose()


async def test_unreachable_database_says_so() -> None:
    database = Database(make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none"))
    try:
        with pytest.raises(ServiceUnavailableError) as caught:
            await require_schema_at_head(database)
    finally:
        database.dispose()
    assert caught.value.code == "database_unavailable"
