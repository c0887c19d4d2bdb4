"""Engine construction with the per-dialect settings the registry relies on.

SQLite: WAL journal, foreign keys on, a busy timeout, and SQLAlchemy (not the sqlite3 module)
emitting ``BEGIN`` so that transactions really are transactions. Engines made with
``write=True`` semantics (see :func:`writer`) begin with ``BEGIN IMMEDIATE``, taking the write lock
up front, so read-then-write units of work serialise instead of failing with "database is locked".
Server databases (PostgreSQL): connections are pinged before use and connecting is bounded in
time (:data:`DEFAULT_CONNECT_TIMEOUT_S`), so an outage fails requests quickly and ends by itself.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

logger = logging.getLogger(__name__)

_SQLITE_BEGIN_OPTION = "hi_moe_lora_sqlite_begin"
SQLITE_BUSY_TIMEOUT_MS = 30_000
#: Server databases: the longest a unit of work waits for a connection (new or pooled), so a
#: dead or unreachable server answers requests with 503 within seconds, not minutes.
DEFAULT_CONNECT_TIMEOUT_S = 5.0


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


def make_engine(
    url: str, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, **kwargs: Any
) -> Engine:
    """An engine for ``url`` configured for the registry (SQLite pragmas, pool pre-ping).

    On a server database, making a connection and waiting for a pooled one are both bounded
    by ``connect_timeout_s`` (a ``connect_timeout`` in the URL wins), and every pooled
    connection is pinged before use, so a dead server fails fast and a restarted one is
    picked up again without a restart.
    """
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        _ensure_sqlite_parent(url)
        engine = create_engine(parsed, **kwargs)
        _install_sqlite_hooks(engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    if "poolclass" not in kwargs:  # NullPool and friends take no pool_timeout
        kwargs.setdefault("pool_timeout", connect_timeout_s)
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        connect_args = dict(kwargs.pop("connect_args", {}))
        # libpq takes whole seconds and treats anything below 2 as 2
        connect_args.setdefault("connect_timeout", max(2, math.ceil(connect_timeout_s)))
        kwargs["connect_args"] = connect_args
    return create_engine(parsed, **kwargs)


def writer(engine: Engine) -> Engine:
    """The same engine, but SQLite transactions start with ``BEGIN IMMEDIATE``."""
    if is_sqlite(engine):
        return engine.execution_options(**{_SQLITE_BEGIN_OPTION: "IMMEDIATE"})
    return engine
