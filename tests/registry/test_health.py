"""``/healthz`` always answers; ``/readyz`` only while the database is at the Alembic head."""

from __future__ import annotations

import httpx

from registry.db import migrate


async def test_health_and_readiness(client: httpx.AsyncClient, migrated_url: str) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "revision": migrate.head_revision()}
    migrate.downgrade(migrated_url, "base")  # e.g. someone restored an old backup
    unready = await client.get("/readyz")
    assert unready.status_code == 503
    assert unready.headers["content-type"] == "application/problem+json"
    assert unready.json()["code"] == "schema_not_at_head"
    assert (await client.get("/healthz")).status_code == 200
