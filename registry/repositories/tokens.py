"""Queries on ``access_tokens``: add, find by name, list, the active ones, mark as used."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from registry.db.models import AccessToken


class TokenRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, row: AccessToken) -> AccessToken:
        self.session.add(row)
        self.session.flush()
        return row

    def get(self, name: str, *, lock: bool = False) -> AccessToken | None:
        statement = select(AccessToken).where(AccessToken.name == name)
        if lock:
            statement = statement.with_for_update()
        return self.session.execute(statement).scalar_one_or_none()

    def list_all(self) -> Sequence[AccessToken]:
        return self.session.execute(select(AccessToken).order_by(AccessToken.id)).scalars().all()

    def active(self) -> Sequence[AccessToken]:
        """Tokens not revoked: what the keyring admits."""
        return (
            self.session.execute(
                select(AccessToken).where(AccessToken.revoked_at.is_(None)).order_by(AccessToken.id)
            )
            .scalars()
            .all()
        )

    def active_names(self, scope: str, *, lock: bool = False) -> list[str]:
        """Names of the active tokens of ``scope`` (``lock``: their rows, until commit)."""
        statement = select(AccessToken.name).where(
            AccessToken.scope == scope, AccessToken.revoked_at.is_(None)
        )
        if lock:
            statement = statement.with_for_update()
        return list(self.session.execute(statement).scalars().all())

    def mark_used(self, names: Collection[str], at: datetime) -> None:
        if names:
            self.session.execute(
                update(AccessToken).where(AccessToken.name.in_(names)).values(last_used_at=at)
            )
