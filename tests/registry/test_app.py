"""The composition root: every component built once, wired explicitly, served by one app."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from registry.app import create_app
from registry.components import ControlPlaneApp
from registry.errors import SchemaNotAtHeadError
from registry.openai.versions import ActiveVersionChanged
from registry.settings import ControlPlaneSettings


def test_every_route_is_installed_once(settings: ControlPlaneSettings) -> None:
    app = create_app(settings)
    paths = [getattr(route, "path", None) for route in app.routes]
    for path in (
        "/healthz",
        "/readyz",
        "/admin/v1/resolve/{served_name}",
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/models",
    ):
        assert paths.count(path) == 1, path


def test_components_are_wired_to_each_other(settings: ControlPlaneSettings) -> None:
    app = create_app(settings)
    assert isinstance(app, ControlPlaneApp)
    components = app.components
    assert components.settings is settings
    assert components.front_door.adapters is components.adapters
    assert components.front_door.upstream is components.upstreams
    assert components.front_door.outcomes is components.outcomes
    assert components.adapters.database is components.database
    # the front door hears of promotions exactly once: route afresh, unload the bare name
    listeners = components.adapters._listeners
    assert len(listeners) == 1
    assert isinstance(listeners[0], ActiveVersionChanged)


def test_two_apps_share_nothing(settings: ControlPlaneSettings) -> None:
    first, second = create_app(settings), create_app(settings)
    assert first.components.database is not second.components.database
    assert first.components.upstreams is not second.components.upstreams


async def test_registration_needs_a_served_base_model(migrated_url: str, tmp_path: Path) -> None:
    app = create_app(
        ControlPlaneSettings(
            database_url=migrated_url, artifact_dir=tmp_path, dispatch_embeddings=False
        )
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as http:
            response = await http.post(
                "/admin/v1/adapters/a-lora/versions",
                json={"version": "1.0.0", "source": str(tmp_path)},
            )
    assert response.status_code == 503
    assert response.json()["code"] == "base_model_not_configured"


async def test_front_door_failures_answer_openai_json_without_a_trace(
    database_url: str, tmp_path: Path
) -> None:
    # no lifespan and no schema: the adapter look-up fails inside the front door
    app = create_app(ControlPlaneSettings(database_url=database_url, artifact_dir=tmp_path))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://registry") as http:
        response = await http.post("/v1/completions", json={"model": "x-lora", "prompt": "y"})
    await app.components.upstreams.aclose()
    app.components.database.dispose()
    assert response.status_code == 500
    assert response.json() == {
        "error": {
            "message": "internal error in the control plane",
            "type": "server_error",
            "param": None,
            "code": 500,
        }
    }


async def test_refuses_to_start_on_an_unmigrated_database(
    database_url: str, tmp_path: Path
) -> None:
    app = create_app(ControlPlaneSettings(database_url=database_url, artifact_dir=tmp_path))
    with pytest.raises(SchemaNotAtHeadError, match=r"run `hi-moe-lora db upgrade`"):
        async with app.router.lifespan_context(app):
            pass
