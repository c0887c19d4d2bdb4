"""One managed unit of work: commit on success, roll back (and undo side effects) on failure.

``Database.run(work, write=..., retries=...)`` opens a session, calls ``work(uow)``, commits,
and retries the whole unit a bounded number of times when the database reports a constraint
race (``IntegrityError``); the work re-checks its preconditions on the retry and so turns a lost
race into the proper domain error. Filesystem side effects register compensations with
``uow.on_rollback`` and clean-ups with ``uow.after_commit``.

A database that cannot be reached (connection refused or timed out, the server gone mid-way,
no pooled connection free within the pool timeout) is :class:`DatabaseUnavailable` (503), not
retried here: the caller answers at once and the next unit of work connects afresh. The first
failure of an outage is logged as a warning, the first success after it as "available again".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm import Session, sessionmaker

from registry.db.engine import writer
from registry.errors import ConflictError, DatabaseUnavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_RETRIES = 3


class UnitOfWork:
    """A session plus the compensations of the non-transactional steps taken inside it."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._undo: list[Callable[[], None]] = []
        self._after_commit: list[Callable[[], None]] = []

    def on_rollback(self, action: Callable[[], None]) -> None:
        self._undo.append(action)

    def after_commit(self, action: Callable[[], None]) -> None:
        self._after_commit.append(action)

    def _run_undo(self) -> None:
        for action in reversed(self._undo):
            try:
                action()
            except Exception:
                logger.exception("compensation after rollback failed")

    def _run_after_commit(self) -> None:
        for action in self._after_commit:
            try:
                action()
            except Exception:
                logger.exception("clean-up after commit failed")


class Database:
    """Engine plus session factories; SQLite writers begin with ``BEGIN IMMEDIATE``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._readers = sessionmaker(engine, expire_on_commit=False)
        self._writers = sessionmaker(writer(engine), expire_on_commit=False)
        self._down = False

    def run(
        self,
        work: Callable[[UnitOfWork], T],
        *,
        write: bool = True,
        retries: int = DEFAULT_RETRIES,
    ) -> T:
        for attempt in range(1, retries + 1):
            try:
                return self._run_once(work, write=write)
            except IntegrityError as exc:
                if attempt == retries:
                    raise ConflictError(
                        f"the registry changed concurrently: {exc.orig}", code="integrity_conflict"
                    ) from exc
                logger.info("integrity race (attempt %d/%d): %s", attempt, retries, exc.orig)
        raise AssertionError("unreachable")

    @property
    def available(self) -> bool:
        """False from a unit of work that could not reach the database until one that could."""
        return not self._down

    def _run_once(self, work: Callable[[UnitOfWork], T], *, write: bool) -> T:
        factory = self._writers if write else self._readers
        try:
            with factory() as session:
                uow = UnitOfWork(session)
                try:
                    result = work(uow)
                    if write:
                        session.commit()
                    else:
                        session.rollback()
                except BaseException:
                    _quiet_rollback(session)
                    uow._run_undo()
                    raise
        except (PoolTimeoutError, OperationalError, InterfaceError) as exc:
            if _schema_error(exc):
                raise  # SQLite reports a missing table as "operational": a bug, not an outage
            raise self._unavailable(exc) from exc
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise self._unavailable(exc) from exc
            raise
        if self._down:
            self._down = False
            logger.warning("database available again")
        uow._run_after_commit()
        return result

    def _unavailable(self, exc: Exception) -> DatabaseUnavailable:
        reason = type(getattr(exc, "orig", None) or exc).__name__
        if not self._down:
            self._down = True
            logger.warning("database unavailable (%s): %s", reason, exc)
        else:
            logger.debug("database still unavailable: %s", exc)
        return DatabaseUnavailable(f"the registry's database is unavailable ({reason})")

    def dispose(self) -> None:
        self.engine.dispose()


def _schema_error(exc: Exception) -> bool:
    """SQLite's "no such table/column": the schema is wrong, the database is there."""
    return str(getattr(exc, "orig", exc)).startswith("no such ")


def _quiet_rollback(session: Session) -> None:
    """Roll back; on a connection that is already gone this fails too, and the first error
    (the one being raised) is the one that matters."""
    try:
        session.rollback()
    except Exception:
        logger.debug("rollback failed after an error", exc_info=True)
