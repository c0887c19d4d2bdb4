"""Engine construction with the per-dialect settings the registry relies on.

SQLite: WAL journal, foreign keys on, a busy timeout, and SQLAlchemy (not the sqlite3 module)
emitting ``BEGIN`` so that transactions really are transactions. Engines made with
``write=True`` semantics (see :func:`writer`) begin with ``BEGIN IMMEDIATE``, taking the write lock
up front, so read-then-write units of work serialise instead of failing with "database is locked".
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

logger = logging.getLogger(__name__)

_SQLITE_BEGIN_OPTION = "hi_moe_lora_sqlite_begin"
SQLITE_BUSY_TIMEOUT_MS = 30_000


def _ensure_sqlite_parent(url: str) -> None:
    database = make_url(url).database
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _install_sqlite_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get(_SQLITE_BEGIN_OPTION, "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def normalise_url(url: str) -> URL:
    """Plain ``postgresql://`` means psycopg 3 (our ``postgres`` extra), not psycopg2."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` configured for the registry (SQLite pragmas, pool pre-ping)."""
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        _ensure_sqlite_parent(url)
        engine = create_engine(parsed, **kwargs)
        _install_sqlite_hooks(engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(parsed, **kwargs)


def writer(engine: Engine) -> Engine:
    """The same engine, but SQLite transactions start with ``BEGIN IMMEDIATE``."""
    if is_sqlite(engine):
        return engine.execution_options(**{_SQLITE_BEGIN_OPTION: "IMMEDIATE"})
    return engine
