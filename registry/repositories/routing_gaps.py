"""Queries on ``routing_gaps``: insert a batch, page newest first, read a window for summaries."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, insert, select
from sqlalchemy.orm import Session

from registry.db.models import RoutingGap


class RoutingGapRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add_many(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self.session.execute(insert(RoutingGap), list(rows))

    @staticmethod
    def _window(
        statement: Select[Any], since: datetime | None, until: datetime | None
    ) -> Select[Any]:
        if since is not None:
            statement = statement.where(RoutingGap.created_at >= since)
        if until is not None:
            statement = statement.where(RoutingGap.created_at < until)
        return statement

    def page(
        self, *, limit: int, offset: int, since: datetime | None, until: datetime | None
    ) -> tuple[int, Sequence[RoutingGap]]:
        """(total in the window, the page newest first)."""
        total = self.session.execute(
            self._window(select(func.count(RoutingGap.id)), since, until)
        ).scalar_one()
        rows = (
            self.session.execute(
                self._window(select(RoutingGap), since, until)
                .order_by(RoutingGap.created_at.desc(), RoutingGap.id.desc())
                .limit(limit)
                .offset(offset)
            )
            .scalars()
            .all()
        )
        return int(total), rows

    def newest(self, *, limit: int, since: datetime | None) -> Sequence[RoutingGap]:
        return (
            self.session.execute(
                self._window(select(RoutingGap), since, None)
                .order_by(RoutingGap.created_at.desc(), RoutingGap.id.desc())
                .limit(limit)
            )
            .scalars()
            .all()
        )
