"""Database fixtures shared by the registry, migration and CLI tests.

SQLite: a fresh file per test. PostgreSQL: a fresh schema per test in the database named by
``HI_MOE_LORA_TEST_POSTGRES_URL`` (the URL pins ``search_path`` to it), dropped afterwards, so
parallel runs never collide. PostgreSQL tests are skipped, with the reason, when it is unreachable.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from benchmarks.postgres import POSTGRES_URL, scratch_schema


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'registry.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with ExitStack() as stack:
        try:
            url = stack.enter_context(scratch_schema(POSTGRES_URL, prefix="hml_test"))
        except OperationalError as exc:
            pytest.skip(
                f"PostgreSQL unreachable at {POSTGRES_URL} (HI_MOE_LORA_TEST_POSTGRES_URL): {exc}"
            )
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """An empty database of each kind (not migrated)."""
    name = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    url: str = request.getfixturevalue(name)
    return url
