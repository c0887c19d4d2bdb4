"""The app factory: refuses to start on an un-migrated database; health and readiness."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from registry.app import create_app
from registry.db import migrate
from registry.errors import SchemaNotAtHeadError
from registry.services.adapters import AdapterService
from registry.settings import ControlPlaneSettings


async def test_refuses_to_start_on_an_unmigrated_database(
    database_url: str, tmp_path: Path
) -> None:
    app = create_app(ControlPlaneSettings(database_url=database_url, artifact_dir=tmp_path))
    with pytest.raises(SchemaNotAtHeadError, match=r"run `hi-moe-lora db upgrade`"):
        async with app.router.lifespan_context(app):
            pass


async def test_refuses_to_start_on_a_downgraded_database(migrated_url: str, tmp_path: Path) -> None:
    migrate.downgrade(migrated_url, "base")
    app = create_app(ControlPlaneSettings(database_url=migrated_url, artifact_dir=tmp_path))
    with pytest.raises(SchemaNotAtHeadError):
        async with app.router.lifespan_context(app):
            pass


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


def test_services_are_on_app_state(settings: ControlPlaneSettings) -> None:
    app = create_app(settings)
    assert isinstance(app.state.adapters, AdapterService)
    assert app.state.settings is settings
    paths = {getattr(route, "path", None) for route in app.routes}
    assert {"/healthz", "/readyz", "/admin/v1/resolve/{served_name}"} <= paths


async def test_registration_needs_a_served_base_model(migrated_url: str, tmp_path: Path) -> None:
    app = create_app(ControlPlaneSettings(database_url=migrated_url, artifact_dir=tmp_path))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as http:
            response = await http.post(
                "/admin/v1/adapters/a-lora/versions",
                json={"version": "1.0.0", "source": str(tmp_path)},
            )
    assert response.status_code == 503
    assert response.json()["code"] == "base_model_not_configured"
