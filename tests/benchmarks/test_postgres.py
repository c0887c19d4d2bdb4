"""benchmarks/postgres.py: a throwaway schema, there while in use and gone afterwards."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from benchmarks.postgres import POSTGRES_URL, scratch_schema


def _schemas() -> set[str]:
    engine = create_engine(POSTGRES_URL, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            names = connection.execute(text("SELECT schema_name FROM information_schema.schemata"))
            return {str(name) for (name,) in names}
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_the_schema_is_the_search_path_and_is_dropped_afterwards() -> None:
    try:
        before = _schemas()
    except OperationalError as exc:
        pytest.skip(f"PostgreSQL unreachable at {POSTGRES_URL}: {exc}")
    with scratch_schema(POSTGRES_URL, prefix="hml_scratch") as url:
        engine = create_engine(url, poolclass=NullPool)
        try:
            with engine.connect() as connection:
                current = connection.execute(text("SELECT current_schema()")).scalar_one()
        finally:
            engine.dispose()
        assert current.startswith("hml_scratch_")
        assert current in _schemas() - before
    assert current not in _schemas()


def test_an_unreachable_server_raises() -> None:
    with (
        pytest.raises(OperationalError),
        scratch_schema(
            "postgresql+psycopg://nobody@127.0.0.1:9/none?connect_timeout=2", prefix="hml_scratch"
        ),
    ):
        pass
