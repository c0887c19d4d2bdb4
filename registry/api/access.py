"""Admin API of access control: tokens (create, list, revoke), the audit log, the access state.

Admin only. A created token's secret is in the creation's answer and nowhere else; listings
show names, scopes and dates, never a secret or hash.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from hi_moe_lora.control_api import paths
from registry.api.dispatcher import Moment
from registry.api.problems import PROBLEM_JSON
from registry.api.schemas import (
    AccessOut,
    AuditEventOut,
    AuditPageOut,
    Problem,
    TokenCreatedOut,
    TokenIn,
    TokenListOut,
    TokenOut,
)
from registry.dependencies import AdminCaller, AuditDep, GatekeeperDep, TokensDep
from registry.errors import InvalidRequestError
from registry.repositories.audit import AuditFilter
from registry.services.audit import MAX_PAGE

_problem = {"model": Problem, "content": {PROBLEM_JSON: {}}}
router = APIRouter(
    prefix=paths.ADMIN_PREFIX,
    tags=["access"],
    responses={401: _problem, 403: _problem, 404: _problem, 409: _problem, 422: _problem},
)

Filter = Annotated[str | None, Query(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]*$")]


@router.post(paths.TOKENS, status_code=status.HTTP_201_CREATED, response_model=TokenCreatedOut)
async def create_token(
    body: TokenIn, caller: AdminCaller, tokens: TokensDep, response: Response
) -> TokenCreatedOut:
    created = await tokens.create(body.name, body.scope, actor=caller.name)
    response.headers["Location"] = paths.admin_path(paths.TOKEN, name=created.info.name)
    response.headers["Cache-Control"] = "no-store"
    return TokenCreatedOut(
        **TokenOut.model_validate(created.info).model_dump(), token=created.secret
    )


@router.get(paths.TOKENS, response_model=TokenListOut)
async def list_tokens(_: AdminCaller, tokens: TokensDep) -> TokenListOut:
    return TokenListOut(tokens=[TokenOut.model_validate(t) for t in await tokens.list_tokens()])


@router.delete(paths.TOKEN, response_model=TokenOut)
async def revoke_token(name: str, caller: AdminCaller, tokens: TokensDep) -> TokenOut:
    """Revoke at once on this instance, within ``access_refresh_s`` on the others."""
    return TokenOut.model_validate(await tokens.revoke(name, actor=caller.name))


@router.get(paths.AUDIT, response_model=AuditPageOut)
async def list_audit(
    _: AdminCaller,
    audit: AuditDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    before_id: Annotated[int | None, Query(ge=1)] = None,
    adapter: Filter = None,
    actor: Filter = None,
    action: Filter = None,
    since: Moment = None,
) -> AuditPageOut:
    """Newest first; ``before_id`` (the previous page's ``next_before_id``) or ``offset``
    pages back; filters match exactly; ``since`` is inclusive (ISO 8601 with a time zone)."""
    _check_since(since)
    where = AuditFilter(
        adapter=adapter, actor=actor, action=action, since=since, before_id=before_id
    )
    events = await audit.page(where, limit=limit, offset=offset)
    return AuditPageOut(
        events=[AuditEventOut.model_validate(e) for e in events],
        limit=limit,
        next_before_id=events[-1].id if len(events) == limit else None,
    )


@router.get(paths.ACCESS, response_model=AccessOut)
async def access_state(_: AdminCaller, gatekeeper: GatekeeperDep) -> AccessOut:
    """Whether access control is on (``open``: no admin secret, everyone may do everything)."""
    openings = gatekeeper.openings
    return AccessOut(
        access="on" if gatekeeper.closed else "open",
        require_api_keys=openings.require_api_keys,
        metrics_public=openings.metrics_public,
        health_public=openings.health_public,
    )


def _check_since(since: datetime | None) -> None:
    if since is not None and since.tzinfo is None:
        raise InvalidRequestError(
            "since needs a time zone (e.g. 2026-11-23T10:00:00Z)", code="naive_time"
        )
