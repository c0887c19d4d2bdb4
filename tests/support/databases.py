"""Database fixtures shared by the registry, migration and CLI tests.

SQLite: a fresh file per test. PostgreSQL: a fresh schema per test in the database named by
``HI_MOE_LORA_TEST_POSTGRES_URL`` (the URL pins ``search_path`` to it), dropped afterwards, so
parallel runs never collide. PostgreSQL tests are skipped, with the reason, when it is unreachable.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
POSTGRES_URL = os.environ.get("HI_MOE_LORA_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'registry.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    admin = create_engine(POSTGRES_URL, poolclass=NullPool)
    schema = f"hml_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    except OperationalError as exc:
        admin.dispose()
        pytest.skip(
            f"PostgreSQL unreachable at {POSTGRES_URL} (HI_MOE_LORA_TEST_POSTGRES_URL): {exc}"
        )
    url = make_url(POSTGRES_URL).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """An empty database of each kind (not migrated)."""
    name = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    url: str = request.getfixturevalue(name)
    return url
