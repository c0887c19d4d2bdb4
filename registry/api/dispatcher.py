"""Admin API of the dispatcher: its status, and routing gaps (the tasks no specialist matched)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BeforeValidator

from hi_moe_lora.control_api import paths
from registry.api.problems import PROBLEM_JSON
from registry.api.schemas import (
    CountOut,
    DispatcherStatusOut,
    Problem,
    RoutingGapOut,
    RoutingGapPageOut,
    RoutingGapSummaryOut,
)
from registry.dependencies import DispatchDep, RoutingGapsDep, admin_caller
from registry.errors import InvalidRequestError

_problem = {"model": Problem, "content": {PROBLEM_JSON: {}}}
router = APIRouter(
    prefix=paths.ADMIN_PREFIX,
    tags=["dispatcher"],
    dependencies=[Depends(admin_caller)],  # admin only while access control is on
    responses={401: _problem, 403: _problem},
)

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _iso_8601(value: Any) -> Any:
    """Only ISO 8601, as documented: pydantic would also read ``0.0`` as a Unix time."""
    if isinstance(value, str) and not _ISO_DATE.match(value):
        raise ValueError("expected an ISO 8601 date-time, e.g. 2026-11-23T10:00:00Z")
    return value


Moment = Annotated[datetime | None, BeforeValidator(_iso_8601)]


@router.get(paths.DISPATCHER, response_model=DispatcherStatusOut)
async def dispatcher_status(dispatch: DispatchDep) -> DispatcherStatusOut:
    """Which tiers run (tier 3 needs the ``dispatch`` extra) and the fleet it dispatches to."""
    status = await dispatch.status()
    return DispatcherStatusOut.model_validate(status, from_attributes=True)


def _check_window(since: datetime | None, until: datetime | None) -> None:
    for moment in (since, until):
        if moment is not None and moment.tzinfo is None:
            raise InvalidRequestError(
                "since/until need a time zone (e.g. 2026-11-23T10:00:00Z)", code="naive_time"
            )
    if since is not None and until is not None and since >= until:
        raise InvalidRequestError("since must be before until", code="empty_window")


@router.get(paths.ROUTING_GAPS, response_model=RoutingGapPageOut)
async def list_gaps(
    gaps: RoutingGapsDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    since: Moment = None,
    until: Moment = None,
) -> RoutingGapPageOut:
    """Newest first; ``since`` inclusive, ``until`` exclusive (ISO 8601 with a time zone)."""
    _check_window(since, until)
    page = await gaps.page(limit=limit, offset=offset, since=since, until=until)
    return RoutingGapPageOut(
        total=page.total,
        limit=limit,
        offset=offset,
        gaps=[RoutingGapOut.model_validate(gap) for gap in page.gaps],
    )


@router.get(paths.ROUTING_GAP_SUMMARY, response_model=RoutingGapSummaryOut)
async def summarise_gaps(
    gaps: RoutingGapsDep,
    top: Annotated[int, Query(ge=1, le=100)] = 20,
    since: Moment = None,
) -> RoutingGapSummaryOut:
    """The most frequent unmatched terms and nearest domains: material for a new specialist."""
    _check_window(since, None)
    summary = await gaps.summary(top=top, since=since)
    return RoutingGapSummaryOut(
        gaps=summary.gaps,
        terms=[CountOut(value=v, count=c) for v, c in summary.terms],
        nearest_domains=[CountOut(value=v, count=c) for v, c in summary.nearest_domains],
    )
