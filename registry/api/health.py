"""Liveness (``/healthz``) and readiness (``/readyz``: the database answers and is at head, and
at least one vLLM upstream passed its last health check while health checks run)."""

from __future__ import annotations

from fastapi import APIRouter

from registry.dependencies import DatabaseDep, HealthDep, SettingsDep
from registry.operations.readiness import require_ready

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "not ready (problem+json)"}})
async def readyz(database: DatabaseDep, health: HealthDep, settings: SettingsDep) -> dict[str, str]:
    head = await require_ready(database, health if settings.health_checks else None)
    return {"status": "ready", "revision": head}
