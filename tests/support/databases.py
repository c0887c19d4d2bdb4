"""Database fixtures shared by the registry, access, migration and CLI tests.

SQLite: a fresh file per test. PostgreSQL: a fresh schema per test in the database named by
``HI_MOE_LORA_TEST_POSTGRES_URL`` (the URL pins ``search_path`` to it), dropped afterwards, so
parallel runs never collide. PostgreSQL tests are skipped, with the reason, when it is unreachable.

``migrated_url`` gives either at the migrations' head. A SQLite file is a copy of one file the
session migrated once (Alembic's upgrade takes about 0.2 s, and hundreds of tests need a
migrated database; the migrations' own tests run them on empty databases).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import ExitStack, closing
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from benchmarks.postgres import POSTGRES_URL, scratch_schema
from registry.db.migrate import upgrade_to_head


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


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file at the migrations' head, migrated once per session (tests get copies)."""
    path = tmp_path_factory.mktemp("migrated-template") / "registry.db"
    upgrade_to_head(f"sqlite:///{path}")
    return path


@pytest.fixture
def migrated_url(database_url: str, request: pytest.FixtureRequest) -> str:
    """``database_url`` at the migrations' head: SQLite as a copy of the session's migrated
    file, PostgreSQL by running the migrations in the test's schema."""
    parsed = make_url(database_url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        upgrade_to_head(database_url)
        return database_url
    template: Path = request.getfixturevalue("migrated_sqlite_template")
    copy_sqlite(template, Path(parsed.database))
    return database_url


def copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database (SQLite's online backup: a WAL is included)."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
