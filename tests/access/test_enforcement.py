"""Access control on a real app (SQLite and PostgreSQL): who may call which route.

Every admin route without a token is 401 (problem+json, ``WWW-Authenticate: Bearer``), with a
resolver or inference token 403, with an admin token past the gate; the resolver token opens the
resolver's look-up only; ``/v1`` needs an API key when required (OpenAI-style 401/403); revoked
keys are refused at once here and within ``access_refresh_s`` on another instance; secrets are
stored as SHA-256 only and never logged.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from registry.access.secrets import digest
from registry.app import create_app
from registry.components import ControlPlaneApp
from registry.db.models import AccessToken
from registry.db.session import UnitOfWork
from registry.settings import ControlPlaneSettings
from tests.access.conftest import ADMIN, RESOLVER, bearer

PARAMS = {
    "name": "x-lora",
    "version": "1.0.0",
    "served_name": "x-lora",
    "file": "adapter_config.json",
}


def _admin_routes(app: ControlPlaneApp) -> list[tuple[str, str]]:
    """(method, concrete path) of every admin route the app serves."""
    routes: list[tuple[str, str]] = []
    for route in app.routes:
        path = getattr(route, "path", "")
        if not path.startswith("/admin/v1"):
            continue
        concrete = re.sub(r"\{(\w+)\}", lambda m: PARAMS[m.group(1)], path)
        for method in sorted(getattr(route, "methods", set()) - {"HEAD", "OPTIONS"}):
            routes.append((method, concrete))
    return routes


async def _call(
    http: httpx.AsyncClient, method: str, path: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    body = {} if method in {"POST", "PUT"} else None
    return await http.request(method, path, json=body, headers=headers)


async def _token(http: httpx.AsyncClient, name: str, scope: str) -> str:
    response = await http.post(
        "/admin/v1/tokens", json={"name": name, "scope": scope}, headers=bearer(ADMIN)
    )
    assert response.status_code == 201, response.text
    secret: str = response.json()["token"]
    return secret


async def test_every_admin_route_needs_an_admin_token(
    closed_app: ControlPlaneApp, closed: httpx.AsyncClient
) -> None:
    routes = _admin_routes(closed_app)
    assert len(routes) >= 20  # the whole admin API, tokens and audit included
    api_key = await _token(closed, "matrix-key", "inference")
    metrics_key = await _token(closed, "matrix-metrics", "metrics")
    for method, path in routes:
        anonymous = await _call(closed, method, path)
        assert anonymous.status_code == 401, (method, path, anonymous.text)
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert anonymous.headers["content-type"].startswith("application/problem+json")
        assert anonymous.json()["code"] == "unauthorized"
        wrong = await _call(closed, method, path, bearer("hml_not-a-token"))
        assert wrong.status_code == 401, (method, path)
        for secret in (api_key, metrics_key):
            narrow = await _call(closed, method, path, bearer(secret))
            assert narrow.status_code == 403, (method, path, narrow.text)
            assert narrow.json()["code"] == "forbidden"
        resolver = await _call(closed, method, path, bearer(RESOLVER))
        if path.startswith(("/admin/v1/resolve/", "/admin/v1/artifacts/")):
            assert resolver.status_code == 404  # past the gate: no such adapter
        else:
            assert resolver.status_code == 403, (method, path)
        admin = await _call(closed, method, path, bearer(ADMIN))
        assert admin.status_code not in (401, 403), (method, path, admin.text)


async def test_the_resolver_token_resolves(closed: httpx.AsyncClient, make_adapter: object) -> None:
    assert callable(make_adapter)
    registered = await closed.post(
        "/admin/v1/adapters/res-lora/versions",
        json={"version": "1.0.0", "source": str(make_adapter("r"))},
        headers=bearer(ADMIN),
    )
    assert registered.status_code == 201, registered.text
    answer = await closed.get("/admin/v1/resolve/res-lora", headers=bearer(RESOLVER))
    assert answer.status_code == 200
    assert answer.json()["version"] == "1.0.0"
    listing = await closed.get("/admin/v1/adapters", headers=bearer(RESOLVER))
    assert listing.status_code == 403


async def test_api_keys_on_v1_and_their_revocation(
    closed_app: ControlPlaneApp, closed: httpx.AsyncClient
) -> None:
    body = {"request_id": "0" * 32, "success": True}  # unknown request: 404 past the gate
    refused = await closed.post("/v1/feedback", json=body)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert refused.json()["error"]["code"] == "invalid_api_key"
    assert refused.json()["error"]["type"] == "invalid_request_error"
    resolver = await closed.post("/v1/feedback", json=body, headers=bearer(RESOLVER))
    assert resolver.status_code == 403
    assert resolver.json()["error"]["code"] == "insufficient_scope"

    key = await _token(closed, "team-a", "inference")
    accepted = await closed.post("/v1/feedback", json=body, headers=bearer(key))
    assert accepted.status_code == 404, accepted.text
    models = await closed.get("/v1/models", headers=bearer(key))
    assert models.status_code == 200  # the registry's catalogue

    revoked = await closed.delete("/admin/v1/tokens/team-a", headers=bearer(ADMIN))
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    after = await closed.post("/v1/feedback", json=body, headers=bearer(key))
    assert after.status_code == 401  # this instance: at once
    again = await closed.delete("/admin/v1/tokens/team-a", headers=bearer(ADMIN))
    assert again.status_code == 409
    assert again.json()["code"] == "token_revoked"
    unknown = await closed.delete("/admin/v1/tokens/nobody", headers=bearer(ADMIN))
    assert unknown.status_code == 404

    scrape = (await closed.get("/metrics")).text
    assert 'hi_moe_lora_client_requests_total{client="team-a"} 2.0' in scrape
    assert 'hi_moe_lora_client_requests_total{client="_anonymous"}' not in scrape


async def test_revocation_through_another_instance_within_the_refresh_bound(
    closed_settings: ControlPlaneSettings, closed: httpx.AsyncClient
) -> None:
    key = await _token(closed, "shared-key", "inference")
    body = {"request_id": "0" * 32, "success": True}
    other_app = create_app(closed_settings)  # a second instance on the same database
    async with other_app.router.lifespan_context(other_app):
        transport = httpx.ASGITransport(app=other_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://other") as other:
            assert (
                await closed.post("/v1/feedback", json=body, headers=bearer(key))
            ).status_code == 404
            revoked = await other.delete("/admin/v1/tokens/shared-key", headers=bearer(ADMIN))
            assert revoked.status_code == 200
            started = time.monotonic()
            while True:
                status = (
                    await closed.post("/v1/feedback", json=body, headers=bearer(key))
                ).status_code
                if status == 401:
                    break
                assert status == 404
                assert time.monotonic() - started < 5 * closed_settings.access_refresh_s + 2
                await asyncio.sleep(0.05)
            assert time.monotonic() - started <= closed_settings.access_refresh_s + 1.0


async def test_only_the_hash_is_stored_and_no_secret_is_logged(
    closed_app: ControlPlaneApp, closed: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = await _token(closed, "logged-key", "inference")
    for headers in (bearer(key), bearer(ADMIN), bearer(RESOLVER), bearer("hml_wrong"), {}):
        await closed.get("/admin/v1/tokens", headers=headers)
        await closed.post(
            "/v1/feedback", json={"request_id": "1", "success": True}, headers=headers
        )
    await closed.delete("/admin/v1/tokens/logged-key", headers=bearer(ADMIN))
    await closed.post(
        "/v1/feedback", json={"request_id": "1", "success": True}, headers=bearer(key)
    )

    def read(uow: UnitOfWork) -> list[dict[str, Any]]:
        rows = uow.session.execute(select(AccessToken.__table__)).mappings().all()
        return [dict(row) for row in rows]

    rows = closed_app.components.database.run(read, write=False)
    (row,) = [r for r in rows if r["name"] == "logged-key"]
    assert row["sha256"] == digest(key)
    assert row["revoked_at"] is not None
    assert all(key not in str(value) for value in row.values())  # every column, as stored
    assert "logged-key" in caplog.text  # the log names tokens ...
    for secret in (key, ADMIN, RESOLVER):
        assert secret not in caplog.text  # ... never their secrets
    assert ADMIN not in repr(closed_app.components.settings)
    assert closed_app.components.settings.admin_token is None  # only the hash is kept
    listing = (await closed.get("/admin/v1/tokens", headers=bearer(ADMIN))).text
    assert key not in listing
    assert digest(key) not in listing


async def test_metrics_and_health_closed_when_configured(
    closed_settings: ControlPlaneSettings,
) -> None:
    settings = closed_settings.model_copy(
        update={"metrics_public": False, "health_public": False, "require_api_keys": False}
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as http:
            metrics_key = await _token(http, "prometheus", "metrics")
            api_key = await _token(http, "client-b", "inference")
            assert (await http.get("/metrics")).status_code == 401
            assert (await http.get("/metrics", headers=bearer(api_key))).status_code == 403
            assert (await http.get("/metrics", headers=bearer(metrics_key))).status_code == 200
            health = await http.get("/v1/health")
            assert health.status_code == 401
            assert health.json()["error"]["code"] == "invalid_api_key"
            assert (await http.get("/v1/health", headers=bearer(metrics_key))).status_code == 200
            assert (await http.get("/healthz")).status_code == 200  # probes: always open
            assert (await http.get("/readyz")).status_code == 200
            # API keys not required: /v1 takes anyone, and names the clients it knows
            body = {"request_id": "0" * 32, "success": True}
            assert (await http.post("/v1/feedback", json=body)).status_code == 404
            known = await http.post("/v1/feedback", json=body, headers=bearer(api_key))
            assert known.status_code == 404
            scrape = (await http.get("/metrics", headers=bearer(ADMIN))).text
            assert 'hi_moe_lora_client_requests_total{client="_anonymous"} 1.0' in scrape
            assert 'hi_moe_lora_client_requests_total{client="client-b"} 1.0' in scrape


async def test_open_access_says_so(open_client: httpx.AsyncClient) -> None:
    state = await open_client.get("/admin/v1/access")
    assert state.status_code == 200
    assert state.json()["access"] == "open"
    assert (await open_client.get("/admin/v1/adapters")).status_code == 200


async def test_an_admin_token_made_through_the_api_closes_access(
    open_client: httpx.AsyncClient,
) -> None:
    created = await open_client.post("/admin/v1/tokens", json={"name": "alice", "scope": "admin"})
    assert created.status_code == 201
    assert created.headers["cache-control"] == "no-store"
    secret = created.json()["token"]
    assert secret.startswith("hml_")
    assert len(secret) > 40
    assert (await open_client.get("/admin/v1/adapters")).status_code == 401
    state = await open_client.get("/admin/v1/access", headers=bearer(secret))
    assert state.json()["access"] == "on"
    last = await open_client.delete("/admin/v1/tokens/alice", headers=bearer(secret))
    assert last.status_code == 409  # revoking the last admin secret would open everything
    assert last.json()["code"] == "last_admin_token"
