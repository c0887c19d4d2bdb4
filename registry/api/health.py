"""Liveness (``/healthz``) and readiness (``/readyz``: the database answers and is at head)."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request
from sqlalchemy.exc import SQLAlchemyError

from registry.db.migrate import current_revision_of, head_revision
from registry.errors import SchemaNotAtHeadError, ServiceUnavailableError
from registry.services.adapters import AdapterService

logger = logging.getLogger(__name__)

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> dict[str, str]:
    service: AdapterService = request.app.state.adapters
    try:
        revision = await asyncio.to_thread(current_revision_of, service.database.engine)
    except SQLAlchemyError as exc:
        logger.warning("readiness: database unreachable: %s", exc)
        raise ServiceUnavailableError(
            f"database unreachable: {type(exc).__name__}", code="database_unreachable"
        ) from exc
    head = head_revision()
    if revision != head:
        raise SchemaNotAtHeadError()
    return {"status": "ready", "revision": head}
