"""Routing gaps: tasks no specialist matched, kept (and summarised) for the next specialist.

The dispatcher hands each fallback to a background writer that calls :meth:`RoutingGapLog.record`
in batches (no database write on the request path). :meth:`RoutingGapLog.page` lists them newest
first; :meth:`RoutingGapLog.summary` counts the most frequent unmatched terms and nearest domains
over the newest :data:`SUMMARY_WINDOW_ROWS` gaps of a time window.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from registry.db.models import RoutingGap
from registry.db.session import Database, UnitOfWork
from registry.repositories.routing_gaps import RoutingGapRepository
from registry.services.records import as_utc

#: What is kept of a task's objective.
EXCERPT_CHARS = 2_000
#: How many of the newest gaps a summary reads.
SUMMARY_WINDOW_ROWS = 5_000


@dataclass(frozen=True)
class GapRecord:
    """One fallback: what the task said and how close each tier came."""

    objective: str
    reason: str
    context_refs: tuple[str, ...] = ()
    extracted_domains: tuple[str, ...] = ()
    terms: tuple[str, ...] = ()
    tier_scores: dict[str, float] = field(default_factory=dict)
    nearest_domain: str | None = None
    nearest_score: float | None = None
    request_id: str | None = None
    created_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))


@dataclass(frozen=True)
class GapInfo:
    id: int
    created_at: datetime
    task_excerpt: str
    context_refs: tuple[str, ...]
    extracted_domains: tuple[str, ...]
    terms: tuple[str, ...]
    tier_scores: dict[str, float]
    nearest_domain: str | None
    nearest_score: float | None
    reason: str
    request_id: str | None


@dataclass(frozen=True)
class GapPage:
    total: int
    gaps: tuple[GapInfo, ...]


@dataclass(frozen=True)
class GapSummary:
    gaps: int
    terms: tuple[tuple[str, int], ...]
    nearest_domains: tuple[tuple[str, int], ...]


def _info(row: RoutingGap) -> GapInfo:
    return GapInfo(
        id=row.id,
        created_at=as_utc(row.created_at),
        task_excerpt=row.task_excerpt,
        context_refs=tuple(row.context_refs),
        extracted_domains=tuple(row.extracted_domains),
        terms=tuple(row.terms),
        tier_scores={str(k): float(v) for k, v in row.tier_scores.items()},
        nearest_domain=row.nearest_domain,
        nearest_score=row.nearest_score,
        reason=row.reason,
        request_id=row.request_id,
    )


def _storable(text: str) -> str:
    """Client text as the database can store it (PostgreSQL refuses NUL in text and JSON)."""
    return text.replace("\x00", "")


class RoutingGapLog:
    def __init__(self, database: Database) -> None:
        self.database = database

    async def record(self, gaps: Sequence[GapRecord]) -> None:
        rows = [
            {
                "created_at": gap.created_at,
                "task_excerpt": _storable(gap.objective[:EXCERPT_CHARS]),
                "context_refs": [_storable(ref) for ref in gap.context_refs],
                "extracted_domains": list(gap.extracted_domains),
                "terms": [_storable(term) for term in gap.terms],
                "tier_scores": dict(gap.tier_scores),
                "nearest_domain": gap.nearest_domain,
                "nearest_score": gap.nearest_score,
                "reason": gap.reason,
                "request_id": gap.request_id,
            }
            for gap in gaps
        ]
        await asyncio.to_thread(
            self.database.run, lambda uow: RoutingGapRepository(uow.session).add_many(rows)
        )

    async def page(
        self,
        *,
        limit: int,
        offset: int = 0,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> GapPage:
        def work(uow: UnitOfWork) -> GapPage:
            total, rows = RoutingGapRepository(uow.session).page(
                limit=limit, offset=offset, since=since, until=until
            )
            return GapPage(total, tuple(_info(row) for row in rows))

        return await asyncio.to_thread(self.database.run, work, write=False)

    async def summary(self, *, top: int, since: datetime | None = None) -> GapSummary:
        def work(uow: UnitOfWork) -> GapSummary:
            rows = RoutingGapRepository(uow.session).newest(limit=SUMMARY_WINDOW_ROWS, since=since)
            terms: Counter[str] = Counter()
            domains: Counter[str] = Counter()
            for row in rows:
                terms.update(set(row.terms))
                if row.nearest_domain:
                    domains[row.nearest_domain] += 1
            return GapSummary(
                len(rows), tuple(terms.most_common(top)), tuple(domains.most_common(top))
            )

        return await asyncio.to_thread(self.database.run, work, write=False)
