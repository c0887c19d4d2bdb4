"""The tokens the control plane accepts right now: an in-memory map from SHA-256 to name/scope.

Two sources: the bootstrap secrets of the settings (hashed once at start-up; no plaintext is
kept) and the active rows of ``access_tokens``. The table is read again after every change made
through this instance (:meth:`Keyring.refresh`, a listener of the token service) and, lazily,
whenever the view is older than ``refresh_s`` when a request needs it, so a token revoked through
another instance sharing the database is refused within ``refresh_s``. If the database cannot be
read, the last view stays in force (logged) until it can.

A presented secret is hashed, looked up in the map, and the stored digest compared with
:func:`hmac.compare_digest`. Secrets never reach a log line.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from registry.access.scopes import SCOPES, Caller, Scope
from registry.access.secrets import digest
from registry.db.models import utcnow
from registry.db.session import Database, UnitOfWork
from registry.repositories.tokens import TokenRepository

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Key:
    """An accepted token: its name, its scope and the SHA-256 of its secret."""

    name: str
    scope: Scope
    sha256: str


class Keyring:
    def __init__(
        self,
        database: Database,
        bootstrap: Iterable[Key],
        *,
        refresh_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.database = database
        self.refresh_s = refresh_s
        self._clock = clock
        self._bootstrap = {key.sha256: key for key in bootstrap}
        self._bootstrap_names = {key.name for key in self._bootstrap.values()}
        self._keys: dict[str, Key] = dict(self._bootstrap)
        self._loaded_at: float | None = None
        self._lock = asyncio.Lock()
        #: Names of database tokens used since the last refresh (``last_used_at`` is written then).
        self._used: set[str] = set()
        self._read_failing = False

    @property
    def closed(self) -> bool:
        """Access control is on: some admin secret exists (bootstrap or an active admin token)."""
        return any(key.scope == "admin" for key in self._keys.values())

    @property
    def bootstrap_admin(self) -> bool:
        return any(key.scope == "admin" for key in self._bootstrap.values())

    async def refresh(self) -> None:
        """Read the active tokens now (and record which were used since the last read)."""
        async with self._lock:
            await self._load()

    async def fresh(self) -> None:
        """Refresh unless the view is younger than ``refresh_s``."""
        if self._stale():
            async with self._lock:
                if self._stale():
                    await self._load()

    async def caller(self, secret: str) -> Caller | None:
        """The caller ``secret`` belongs to, or ``None`` (unknown or revoked)."""
        await self.fresh()
        presented = digest(secret)
        key = self._keys.get(presented)
        if key is None or not hmac.compare_digest(presented, key.sha256):
            return None
        if key.name not in self._bootstrap_names:
            self._used.add(key.name)
        return Caller(key.name, key.scope)

    def _stale(self) -> bool:
        return self._loaded_at is None or self._clock() - self._loaded_at >= self.refresh_s

    async def _load(self) -> None:
        used, self._used = self._used, set()
        try:
            rows = await asyncio.to_thread(
                self.database.run, lambda uow: self._read(uow, used), write=bool(used)
            )
        except Exception as exc:
            self._used |= used
            self._loaded_at = self._clock()  # retried after refresh_s, not on every request
            if not self._read_failing:  # once per outage; each retry at debug level
                logger.warning("access tokens could not be read; keeping the last view: %s", exc)
            else:
                logger.debug("access tokens still unreadable: %s", exc)
            self._read_failing = True
            return
        if self._read_failing:
            self._read_failing = False
            logger.info("access tokens readable again")
        keys = {key.sha256: key for key in rows}
        keys.update(self._bootstrap)
        self._keys = keys
        self._loaded_at = self._clock()

    @staticmethod
    def _read(uow: UnitOfWork, used: set[str]) -> list[Key]:
        repo = TokenRepository(uow.session)
        if used:
            repo.mark_used(used, utcnow())
        return [Key(row.name, _scope(row.scope), row.sha256) for row in repo.active()]


def _scope(value: str) -> Scope:
    for scope in SCOPES:
        if scope == value:
            return scope
    raise ValueError(f"unknown scope in access_tokens: {value!r}")
