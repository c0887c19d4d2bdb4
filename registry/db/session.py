"""One managed unit of work: commit on success, roll back (and undo side effects) on failure.

``Database.run(work, write=..., retries=...)`` opens a session, calls ``work(uow)``, commits,
and retries the whole unit a bounded number of times when the database reports a constraint
race (``IntegrityError``); the work re-checks its preconditions on the retry and so turns a lost
race into the proper domain error. Filesystem side effects register compensations with
``uow.on_rollback`` and clean-ups with ``uow.after_commit``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from registry.db.engine import writer
from registry.errors import ConflictError

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

    def _run_once(self, work: Callable[[UnitOfWork], T], *, write: bool) -> T:
        factory = self._writers if write else self._readers
        with factory() as session:
            uow = UnitOfWork(session)
            try:
                result = work(uow)
                if write:
                    session.commit()
                else:
                    session.rollback()
            except BaseException:
                session.rollback()
                uow._run_undo()
                raise
        uow._run_after_commit()
        return result

    def dispose(self) -> None:
        self.engine.dispose()
