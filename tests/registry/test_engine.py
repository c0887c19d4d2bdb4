"""Engine set-up: SQLite pragmas and BEGIN IMMEDIATE for writers; bounded connecting to a
server database."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from registry.db.engine import make_engine, writer
from tests.support.sockets import unanswered_connects


def test_sqlite_pragmas(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'sub' / 'dir' / 'r.db'}")
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    finally:
        engine.dispose()
    assert (tmp_path / "sub" / "dir" / "r.db").is_file()


def test_writers_serialise_read_modify_write(tmp_path: Path) -> None:
    """Lost updates would show up as a final value below the number of increments."""
    engine = make_engine(f"sqlite:///{tmp_path / 'r.db'}", pool_size=4)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE c (v INTEGER)"))
        connection.execute(text("INSERT INTO c VALUES (0)"))

    def worker() -> None:
        for _ in range(25):
            with Session(writer(engine)) as session:
                value = session.execute(text("SELECT v FROM c")).scalar_one()
                session.execute(text("UPDATE c SET v = :v"), {"v": value + 1})
                session.commit()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with engine.connect() as connection:
        assert connection.execute(text("SELECT v FROM c")).scalar_one() == 100
    engine.dispose()


def test_plain_postgresql_urls_use_psycopg3() -> None:
    engine = make_engine("postgresql://user@db.example:5432/registry")
    assert engine.dialect.driver == "psycopg"
    assert engine.url.database == "registry"
    engine.dispose()


def test_connecting_to_a_server_that_never_answers_is_bounded() -> None:
    engine = make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none", connect_timeout_s=2)
    assert engine.pool.timeout() == 2  # waiting for a pooled connection is bounded too
    engine.dispose()
    with unanswered_connects() as url:
        port = url.rsplit(":", 1)[1]
        engine = make_engine(f"postgresql://nobody@127.0.0.1:{port}/none", connect_timeout_s=2)
        started = time.monotonic()
        with pytest.raises(OperationalError), engine.connect():
            pass
        elapsed = time.monotonic() - started
        engine.dispose()
    assert 1.5 < elapsed < 4.5
