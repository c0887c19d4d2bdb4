"""What happened to each front-door request: statistics per version, and explicit feedback.

:meth:`RequestLog.record` takes a batch of finished requests (from the front door's background
writer) and, in one transaction, folds each adapter version's latencies and outcomes into its
running statistics (one atomic UPDATE per version, :mod:`registry.statistics`), stores which
model served each request id, and purges request records older than the feedback window.
:meth:`RequestLog.feedback` folds a client's ``success`` for one request id into the serving
version's success rate, once: feedback for an id that already has some changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from hi_moe_lora.served_names import parse_served_name
from registry.db.session import Database, UnitOfWork
from registry.errors import NotFoundError
from registry.repositories.adapters import AdapterRepository
from registry.repositories.requests import RequestRecordRepository

logger = logging.getLogger(__name__)

#: How long a request id accepts feedback.
DEFAULT_FEEDBACK_WINDOW_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class FinishedRequest:
    """One front-door request: ``served_name`` is what vLLM served (``name@version`` or base)."""

    request_id: str
    served_name: str
    is_adapter: bool
    latency_ms: float
    ok: bool


@dataclass(frozen=True)
class FeedbackResult:
    request_id: str
    served_name: str
    success: bool
    #: False when this id had feedback already (the first one counts; nothing changed)
    recorded: bool


class RequestLog:
    def __init__(
        self, database: Database, *, feedback_window_s: float = DEFAULT_FEEDBACK_WINDOW_S
    ) -> None:
        self.database = database
        self._window = timedelta(seconds=feedback_window_s)

    async def record(self, requests: Sequence[FinishedRequest]) -> None:
        """Statistics and request records for a batch, in one transaction."""
        at = datetime.now(timezone.utc)
        await asyncio.to_thread(self.database.run, lambda uow: self._record(uow, requests, at))

    def _record(self, uow: UnitOfWork, requests: Sequence[FinishedRequest], at: datetime) -> None:
        adapters = AdapterRepository(uow.session)
        by_served: dict[str, list[FinishedRequest]] = {}
        for request in requests:
            by_served.setdefault(request.served_name, []).append(request)
        version_ids: dict[str, int | None] = {
            served_name: self._version_id(adapters, served_name) if batch[0].is_adapter else None
            for served_name, batch in by_served.items()
        }
        # the base model, and versions deleted since the request, have no statistics; the
        # others are updated in id order: instances sharing a database take the rows' locks in
        # one order, so their concurrent batches wait for each other instead of deadlocking
        folded = sorted((i, s) for s, i in version_ids.items() if i is not None)
        for version_id, served_name in folded:
            batch = by_served[served_name]
            adapters.record_outcomes(
                version_id,
                latencies_ms=[r.latency_ms for r in batch],
                oks=[r.ok for r in batch],
                at=at,
            )
        records = RequestRecordRepository(uow.session)
        records.add_many(
            [
                {
                    "request_id": r.request_id,
                    "served_name": r.served_name,
                    "adapter_version_id": version_ids[r.served_name],
                    "created_at": at,
                }
                for r in requests
            ]
        )
        purged = records.purge_before(at - self._window)
        if purged:
            logger.debug("purged %d request records past the feedback window", purged)

    @staticmethod
    def _version_id(repo: AdapterRepository, served_name: str) -> int | None:
        parsed = parse_served_name(served_name)
        if parsed is None or parsed.version is None:
            return None
        row = repo.served_version(parsed.name, parsed.version)
        return None if row is None else row.id

    async def feedback(self, request_id: str, success: bool) -> FeedbackResult:
        """Raises :class:`NotFoundError` (``request_not_found``) for an id not served here, or
        older than the feedback window."""
        return await asyncio.to_thread(
            self.database.run, lambda uow: self._feedback(uow, request_id, success)
        )

    def _feedback(self, uow: UnitOfWork, request_id: str, success: bool) -> FeedbackResult:
        record = RequestRecordRepository(uow.session).get(request_id, lock=True)
        if record is None:
            raise NotFoundError(
                f"no request {request_id!r} (unknown, or older than the feedback window)",
                code="request_not_found",
            )
        if record.feedback is not None:
            return FeedbackResult(request_id, record.served_name, record.feedback, False)
        record.feedback = success
        record.feedback_at = datetime.now(timezone.utc)
        if record.adapter_version_id is not None:
            AdapterRepository(uow.session).record_feedback(
                record.adapter_version_id, success=success
            )
        return FeedbackResult(request_id, record.served_name, success, True)
