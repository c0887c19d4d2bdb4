"""CompletionPath: the completion endpoints answered before FastAPI, with the routes' behaviour.

A real app (SQLite, access control on, no vLLM listening) over ASGI: the body limit, OpenAI-style
401/403 before anything else, the per-client count, a request id on every answer, and only
``POST`` on the two completion paths taken; everything else still reaches FastAPI.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from registry.app import create_app
from registry.components import ControlPlaneApp
from registry.openai.fast_path import CompletionPath
from registry.openai.proxy import REQUEST_ID_HEADER
from tests.access.conftest import ADMIN, bearer
from tests.openai.live import control_plane_settings
from tests.support.adapter_files import DEFAULT_BASE_MODEL

MAX_BODY = 4096


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[ControlPlaneApp]:
    settings = control_plane_settings(
        tmp_path / "cp",
        DEFAULT_BASE_MODEL,
        ["http://127.0.0.1:9"],  # nothing listens: an admitted completion answers 503
        admin_token=SecretStr(ADMIN),
        require_api_keys=True,
        max_body_bytes=MAX_BODY,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def http(app: ControlPlaneApp) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://cp") as client:
        yield client


async def _api_key(http: httpx.AsyncClient, name: str, scope: str = "inference") -> str:
    answer = await http.post(
        "/admin/v1/tokens", json={"name": name, "scope": scope}, headers=bearer(ADMIN)
    )
    assert answer.status_code == 201, answer.text
    secret: str = answer.json()["token"]
    return secret


def _count(app: ControlPlaneApp, client: str) -> float:
    value = app.components.metrics.registry.get_sample_value(
        "hi_moe_lora_client_requests_total", {"client": client}
    )
    return value or 0.0


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
async def test_no_api_key_is_an_openai_401_with_a_request_id(
    http: httpx.AsyncClient, path: str
) -> None:
    answer = await http.post(path, json={"model": "x", "prompt": "p", "messages": []})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert answer.json()["error"]["code"] == "invalid_api_key"


async def test_a_metrics_token_is_refused_with_403(http: httpx.AsyncClient) -> None:
    metrics_key = await _api_key(http, "scraper", "metrics")
    answer = await http.post(
        "/v1/completions", json={"model": "x", "prompt": "p"}, headers=bearer(metrics_key)
    )
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "insufficient_scope"


async def test_an_admitted_request_is_counted_named_and_forwarded(
    app: ControlPlaneApp, http: httpx.AsyncClient
) -> None:
    key = await _api_key(http, "team-a")
    before = _count(app, "team-a")
    answer = await http.post(
        "/v1/completions",
        json={"model": DEFAULT_BASE_MODEL, "prompt": "p"},
        headers=bearer(key),
    )
    # admitted, routed to the base model, forwarded: nothing listens upstream, hence 503
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["type"] == "server_error"
    assert len(answer.headers[REQUEST_ID_HEADER]) == 32
    assert _count(app, "team-a") == before + 1


async def test_a_bad_body_is_an_openai_400(http: httpx.AsyncClient) -> None:
    key = await _api_key(http, "team-b")
    answer = await http.post("/v1/chat/completions", json={"model": "x"}, headers=bearer(key))
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "messages"
    assert REQUEST_ID_HEADER in answer.headers


async def test_the_body_limit_holds_on_the_fast_path(http: httpx.AsyncClient) -> None:
    key = await _api_key(http, "team-c")
    big = {"model": "x", "prompt": "a" * (MAX_BODY + 1)}
    answer = await http.post("/v1/completions", json=big, headers=bearer(key))
    assert answer.status_code == 413
    assert answer.json()["error"]["type"] == "invalid_request_error"

    async def chunks() -> AsyncIterator[bytes]:  # no content-length: counted as it arrives
        for _ in range(3):
            yield b"x" * MAX_BODY

    streamed = await http.post(
        "/v1/completions",
        content=chunks(),
        headers={**bearer(key), "content-type": "application/json"},
    )
    assert streamed.status_code == 413


async def test_other_methods_and_paths_still_reach_fastapi(http: httpx.AsyncClient) -> None:
    assert (await http.get("/v1/completions")).status_code == 405
    assert (await http.get("/healthz")).status_code == 200
    schema = (await http.get("/openapi.json")).json()
    assert "/v1/completions" in schema["paths"]  # still documented


def test_handles_only_post_on_the_completion_paths() -> None:
    def scope(method: str, path: str, kind: str = "http") -> dict[str, str]:
        return {"type": kind, "method": method, "path": path}

    assert CompletionPath.handles(scope("POST", "/v1/completions"))
    assert CompletionPath.handles(scope("POST", "/v1/chat/completions"))
    assert not CompletionPath.handles(scope("GET", "/v1/completions"))
    assert not CompletionPath.handles(scope("POST", "/v1/completions/"))
    assert not CompletionPath.handles(scope("POST", "/v1/models"))
    assert not CompletionPath.handles({"type": "lifespan"})
