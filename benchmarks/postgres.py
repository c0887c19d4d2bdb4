"""The local PostgreSQL server's URL, and throwaway schemas in it for benchmarks and tests: each
run gets its own schema and drops it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
#: The server benchmarks and tests use: ``HI_MOE_LORA_TEST_POSTGRES_URL``, else CI's local one.
POSTGRES_URL = os.environ.get("HI_MOE_LORA_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


@contextmanager
def scratch_schema(database_url: str, prefix: str) -> Iterator[str]:
    """A new schema ``<prefix>_<random>`` in ``database_url``'s database, dropped on exit; yields
    a URL whose ``search_path`` is that schema. Raises SQLAlchemy's ``OperationalError`` when the
    server cannot be reached."""
    admin = create_engine(database_url, poolclass=NullPool)
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    except BaseException:
        admin.dispose()
        raise
    url = make_url(database_url).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
