"""Liveness (``/healthz``) and readiness (``/readyz``: the database answers and is at head)."""

from __future__ import annotations

from fastapi import APIRouter

from registry.dependencies import DatabaseDep
from registry.operations.readiness import require_schema_at_head

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(database: DatabaseDep) -> dict[str, str]:
    head = await require_schema_at_head(database)
    return {"status": "ready", "revision": head}
