"""The unit of work: commit, rollback with compensations, bounded retry on IntegrityError, and
an unreachable database as :class:`DatabaseUnavailable` (503)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select, text

from registry.db.engine import make_engine
from registry.db.models import Adapter
from registry.db.session import Database, UnitOfWork
from registry.errors import ConflictError, DatabaseUnavailable


@pytest.fixture
def database(migrated_url: str) -> Iterator[Database]:
    db = Database(make_engine(migrated_url))
    yield db
    db.dispose()


def _names(database: Database) -> list[str]:
    return database.run(
        lambda uow: list(uow.session.scalars(select(Adapter.name).order_by(Adapter.name))),
        write=False,
    )


def test_commit_and_after_commit(database: Database) -> None:
    events: list[str] = []

    def work(uow: UnitOfWork) -> str:
        uow.session.add(Adapter(name="a"))
        uow.on_rollback(lambda: events.append("undo"))
        uow.after_commit(lambda: events.append("after"))
        return "done"

    assert database.run(work) == "done"
    assert events == ["after"]
    assert _names(database) == ["a"]


def test_failure_rolls_back_and_compensates(database: Database) -> None:
    events: list[str] = []

    def work(uow: UnitOfWork) -> None:
        uow.session.add(Adapter(name="b"))
        uow.session.flush()
        uow.on_rollback(lambda: events.append("first"))
        uow.on_rollback(lambda: events.append("second"))
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        database.run(work)
    assert events == ["second", "first"]
    assert _names(database) == []


def test_integrity_errors_are_retried_then_mapped(database: Database) -> None:
    database.run(lambda uow: uow.session.add(Adapter(name="taken")))
    attempts: list[int] = []

    def work(uow: UnitOfWork) -> None:
        attempts.append(1)
        uow.session.add(Adapter(name="taken"))
        uow.session.flush()

    with pytest.raises(ConflictError) as caught:
        database.run(work, retries=3)
    assert caught.value.code == "integrity_conflict"
    assert len(attempts) == 3


def test_a_retry_can_succeed(database: Database) -> None:
    database.run(lambda uow: uow.session.add(Adapter(name="taken")))
    names = iter(["taken", "free"])
    database.run(lambda uow: uow.session.add(Adapter(name=next(names))))
    assert _names(database) == ["free", "taken"]


def test_an_unreachable_database_is_database_unavailable_quickly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    database = Database(make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none"))
    try:
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailable) as caught:
                database.run(lambda uow: uow.session.execute(text("SELECT 1")), write=False)
            assert time.monotonic() - started < 5
            assert caught.value.status == 503
            assert caught.value.code == "database_unavailable"
            assert "127.0.0.1" not in caught.value.detail  # no host details to clients
        assert not database.available
    finally:
        database.dispose()
    outages = [r for r in caplog.records if r.getMessage().startswith("database unavailable")]
    assert len(outages) == 1  # logged once per outage


def test_domain_errors_still_roll_back_as_before(database: Database) -> None:
    def work(uow: UnitOfWork) -> None:
        uow.session.add(Adapter(name="rolled-back"))
        uow.session.flush()
        raise ConflictError("no")

    with pytest.raises(ConflictError):
        database.run(work)
    assert "rolled-back" not in _names(database)
    assert database.available
