"""Queries on ``request_records``: which model served a request, and its feedback."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, delete, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from registry.db.models import RequestRecord


class RequestRecordRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add_many(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert request records (``request_id``, ``served_name``, ``adapter_version_id``,
        ``created_at``); a request id seen before is skipped, not an error.

        One Core ``INSERT … ON CONFLICT DO NOTHING`` for the batch: the ORM's per-row work
        here cost the front door 0.25 ms per request at the median (it runs beside the event
        loop; benchmarks/README.md).
        """
        if not rows:
            return
        table = cast(Table, RequestRecord.__table__)
        dialect = self.session.get_bind().dialect.name
        statement: Any
        if dialect == "postgresql":
            statement = postgresql.insert(table).on_conflict_do_nothing()
        elif dialect == "sqlite":
            statement = sqlite.insert(table).on_conflict_do_nothing()
        else:  # pragma: no cover - the registry runs on SQLite or PostgreSQL
            statement = insert(table)
        self.session.execute(statement, list(rows))

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
