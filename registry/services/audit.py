"""The audit log: every state change, who made it, and the small state before and after it.

:func:`record` appends an event inside the unit of work of the change it records, so an
acknowledged change always has its event and a failed one leaves none. :class:`AuditLog` lists
them (newest first, filtered) and records the operations that change no registry row (a
warm-up run) in a transaction of their own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from registry.db.models import AuditEvent
from registry.db.session import Database, UnitOfWork
from registry.repositories.audit import AuditFilter, AuditRepository
from registry.services.records import as_utc

AuditAction = Literal[
    "version.register",
    "version.promote",
    "adapter.rollback",
    "version.delete",
    "adapter.traffic",
    "adapter.dispatch_hints",
    "token.create",
    "token.revoke",
    "warmup.run",
]

#: Most events one listing returns.
MAX_PAGE = 1000


@dataclass(frozen=True)
class AuditEventInfo:
    id: int
    at: datetime
    actor: str
    action: str
    adapter: str | None
    version: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None


def record(
    uow: UnitOfWork,
    actor: str,
    action: AuditAction,
    *,
    adapter: str | None = None,
    version: str | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    """Append one event to the unit of work's transaction (committed, or rolled back, with it)."""
    AuditRepository(uow.session).add(
        AuditEvent(
            actor=actor,
            action=action,
            adapter=adapter,
            version=version,
            before=before,
            after=after,
        )
    )


def _info(row: AuditEvent) -> AuditEventInfo:
    return AuditEventInfo(
        id=row.id,
        at=as_utc(row.at),
        actor=row.actor,
        action=row.action,
        adapter=row.adapter,
        version=row.version,
        before=row.before,
        after=row.after,
    )


class AuditLog:
    """Reads the audit log; records operations that have no transaction of their own."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def page(
        self, where: AuditFilter, *, limit: int, offset: int = 0
    ) -> list[AuditEventInfo]:
        limit = max(1, min(limit, MAX_PAGE))

        def work(uow: UnitOfWork) -> list[AuditEventInfo]:
            rows = AuditRepository(uow.session).page(where, limit=limit, offset=offset)
            return [_info(row) for row in rows]

        return await asyncio.to_thread(self.database.run, work, write=False)

    async def record(
        self,
        actor: str,
        action: AuditAction,
        *,
        adapter: str | None = None,
        version: str | None = None,
        before: dict[str, Any] | None = None,
        after: dict[str, Any] | None = None,
    ) -> None:
        def work(uow: UnitOfWork) -> None:
            record(uow, actor, action, adapter=adapter, version=version, before=before, after=after)

        await asyncio.to_thread(self.database.run, work)
