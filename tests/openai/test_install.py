"""``install``: wired by ``create_app``, idempotent, client closed with the app's lifespan."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from registry.app import create_app
from registry.openai import install
from registry.openai.state import front_door_of, state_of
from tests.openai.live import ServedApp, control_plane_settings
from tests.support.adapter_files import DEFAULT_BASE_MODEL


@pytest.fixture
def settings_dir(tmp_path: Path) -> Path:
    return tmp_path


def test_create_app_installs_the_front_door_once(settings_dir: Path) -> None:
    settings = control_plane_settings(settings_dir, DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"])
    app = create_app(settings)
    routes = [getattr(route, "path", None) for route in app.routes]
    install(app, settings)  # a second install changes nothing
    assert [getattr(route, "path", None) for route in app.routes] == routes
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/models"):
        assert routes.count(path) == 1
    door = front_door_of(app)
    assert door.adapters is app.state.adapters


def test_promotion_listener_is_registered_once(settings_dir: Path) -> None:
    settings = control_plane_settings(settings_dir, DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"])
    app = create_app(settings)
    state = state_of(app)
    listeners = list(app.state.adapters._listeners)
    state.bind(app.state.adapters)
    assert app.state.adapters._listeners == listeners
    assert len(listeners) == 1


def test_lifespan_closes_the_upstream_client(settings_dir: Path) -> None:
    settings = control_plane_settings(settings_dir, DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"])
    app = create_app(settings)
    served = ServedApp(app).start()
    try:
        # a base-model request with vLLM down: the front door opens its client, gets a 503
        response = httpx.post(
            f"{served.url}/v1/completions",
            json={"model": DEFAULT_BASE_MODEL, "prompt": "x"},
            timeout=10,
        )
        assert response.status_code == 503
        client = state_of(app).upstream._client
        assert client is not None
        assert not client.closed
    finally:
        served.stop()
    assert client.closed


def test_internal_failures_answer_openai_json_without_a_trace(settings_dir: Path) -> None:
    settings = control_plane_settings(settings_dir, DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"])
    app = FastAPI()  # no adapter service on app.state: the front door cannot work
    install(app, settings)
    with ServedApp(app) as served:
        response = httpx.post(
            f"{served.url}/v1/completions", json={"model": "x", "prompt": "y"}, timeout=10
        )
    assert response.status_code == 500
    assert response.json() == {
        "error": {
            "message": "internal error in the control plane",
            "type": "server_error",
            "param": None,
            "code": 500,
        }
    }
