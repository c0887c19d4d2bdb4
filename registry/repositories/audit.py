"""Queries on ``audit_events``: append one, page newest first with filters and a cursor."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.db.models import AuditEvent


@dataclass(frozen=True)
class AuditFilter:
    """What a listing keeps: every field set must match (``since`` inclusive)."""

    adapter: str | None = None
    actor: str | None = None
    action: str | None = None
    since: datetime | None = None
    before_id: int | None = None


class AuditRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, event: AuditEvent) -> AuditEvent:
        self.session.add(event)
        self.session.flush()
        return event

    def page(self, where: AuditFilter, *, limit: int, offset: int) -> Sequence[AuditEvent]:
        """Newest first (by id: the order of the commits' inserts)."""
        statement = select(AuditEvent)
        if where.adapter is not None:
            statement = statement.where(AuditEvent.adapter == where.adapter)
        if where.actor is not None:
            statement = statement.where(AuditEvent.actor == where.actor)
        if where.action is not None:
            statement = statement.where(AuditEvent.action == where.action)
        if where.since is not None:
            statement = statement.where(AuditEvent.at >= where.since)
        if where.before_id is not None:
            statement = statement.where(AuditEvent.id < where.before_id)
        statement = statement.order_by(AuditEvent.id.desc()).limit(limit).offset(offset)
        return self.session.execute(statement).scalars().all()
