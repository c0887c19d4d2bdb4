"""The key on every path of vLLM's API server but liveness and metrics (the real vLLM in
tests/operations/test_bindings.py)."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from plugins.port_guard import KeyOnEveryPath


async def _answer(request: Request) -> Response:
    return PlainTextResponse(f"reached {request.url.path}")


def _client(monkeypatch: pytest.MonkeyPatch, key: str | None) -> TestClient:
    if key is None:
        monkeypatch.delenv("VLLM_API_KEY", raising=False)
    else:
        monkeypatch.setenv("VLLM_API_KEY", key)
    paths = ["/adapters", "/invocations", "/health", "/ping", "/metrics", "/metrics/x", "/v1/x"]
    app = Starlette(routes=[Route(p, _answer, methods=["GET", "POST"]) for p in paths])
    app.add_middleware(KeyOnEveryPath)
    return TestClient(app)


def test_every_path_but_liveness_and_metrics_needs_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _client(monkeypatch, "s3cret")
    for path in ("/adapters", "/invocations", "/v1/x"):
        refused = client.post(path, json={})
        assert refused.status_code == 401, path
        assert refused.json() == {"error": "Unauthorized"}
        wrong = client.post(path, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401, path
        basic = client.post(path, headers={"Authorization": "Basic s3cret"})
        assert basic.status_code == 401, path
        ok = client.post(path, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200, path
        assert ok.text == f"reached {path}"
    for path in ("/health", "/ping", "/metrics", "/metrics/x"):
        assert client.get(path).status_code == 200, path


def test_without_a_key_it_lets_everything_through(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _client(monkeypatch, None)
    assert client.post("/adapters").status_code == 200
