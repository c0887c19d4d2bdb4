"""Routing gaps: recorded in batches, listed newest first in a window, summarised."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from registry.db.engine import make_engine
from registry.db.session import Database
from registry.services.routing_gaps import EXCERPT_CHARS, GapRecord, RoutingGapLog

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


@pytest.fixture
def gaps(migrated_url: str) -> Iterator[RoutingGapLog]:
    database = Database(make_engine(migrated_url))
    yield RoutingGapLog(database)
    database.dispose()


def _gap(minute: int, terms: tuple[str, ...], nearest: str | None, text: str = "task") -> GapRecord:
    return GapRecord(
        objective=text,
        reason="no confident match",
        terms=terms,
        tier_scores={"keyword": 0.0, "embedding": 0.21},
        nearest_domain=nearest,
        nearest_score=0.21 if nearest else None,
        created_at=T0 + timedelta(minutes=minute),
    )


async def test_pages_newest_first_within_a_window(gaps: RoutingGapLog) -> None:
    await gaps.record([_gap(i, ("x",), None, text=f"task {i}") for i in range(5)])
    page = await gaps.page(limit=2, offset=1)
    assert page.total == 5
    assert [g.task_excerpt for g in page.gaps] == ["task 3", "task 2"]
    assert page.gaps[0].tier_scores == {"keyword": 0.0, "embedding": 0.21}
    window = await gaps.page(
        limit=10, since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=3)
    )
    assert [g.task_excerpt for g in window.gaps] == ["task 2", "task 1"]
    assert window.total == 2
    assert window.gaps[0].created_at.tzinfo is not None


async def test_long_objectives_are_kept_as_an_excerpt(gaps: RoutingGapLog) -> None:
    await gaps.record([_gap(0, (), None, text="z" * (EXCERPT_CHARS + 500))])
    (gap,) = (await gaps.page(limit=1)).gaps
    assert len(gap.task_excerpt) == EXCERPT_CHARS


async def test_summary_counts_terms_once_per_gap_and_nearest_domains(gaps: RoutingGapLog) -> None:
    await gaps.record(
        [
            _gap(0, ("terraform", "state", "terraform"), "devops"),
            _gap(1, ("terraform", "lock"), "devops"),
            _gap(2, ("sourdough",), None),
            _gap(3, ("haskell", "monad"), "python"),
        ]
    )
    summary = await gaps.summary(top=2)
    assert summary.gaps == 4
    assert summary.terms[0] == ("terraform", 2)
    assert summary.nearest_domains == (("devops", 2), ("python", 1))
    recent = await gaps.summary(top=5, since=T0 + timedelta(minutes=2))
    assert recent.gaps == 2
    assert dict(recent.terms) == {"sourdough": 1, "haskell": 1, "monad": 1}
