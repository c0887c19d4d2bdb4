"""Queries on ``request_records``: which model served a request, and its feedback."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from registry.db.models import RequestRecord


class RequestRecordRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add_many(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert request records (``request_id``, ``served_name``, ``adapter_version_id``,
        ``created_at``); a request id seen before is skipped, not an error."""
        if not rows:
            return
        ids = [row["request_id"] for row in rows]
        known = set(
            self.session.execute(
                select(RequestRecord.request_id).where(RequestRecord.request_id.in_(ids))
            ).scalars()
        )
        fresh = [row for row in rows if row["request_id"] not in known]
        if fresh:
            self.session.execute(insert(RequestRecord), fresh)

    def get(self, request_id: str, *, lock: bool = False) -> RequestRecord | None:
        statement = select(RequestRecord).where(RequestRecord.request_id == request_id)
        if lock:
            statement = statement.with_for_update()
        return self.session.execute(statement).scalar_one_or_none()

    def purge_before(self, moment: datetime) -> int:
        result = self.session.execute(
            delete(RequestRecord).where(RequestRecord.created_at < moment)
        )
        return int(getattr(result, "rowcount", 0) or 0)
