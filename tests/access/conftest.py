"""Access fixtures: a real app (SQLite and PostgreSQL) with access control on, over ASGI.

``closed_app`` runs with bootstrap admin and resolver secrets (``ADMIN``, ``RESOLVER``) and
API keys required; ``Caller`` helpers send the bearer tokens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from registry.app import create_app
from registry.components import ControlPlaneApp
from registry.settings import ControlPlaneSettings
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter

ADMIN = "hml_test-admin-secret-0123456789abcdefghijklmnop"
RESOLVER = "hml_test-resolver-secret-0123456789abcdefghijkl"


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def source_root(tmp_path: Path) -> Path:
    return tmp_path / "sources"


@pytest.fixture
def make_adapter(source_root: Path) -> Callable[..., Path]:
    def make(label: str = "adapter", **options: Any) -> Path:
        return write_adapter(source_root / label, **options)

    return make


@pytest.fixture
def base_settings(migrated_url: str, tmp_path: Path, source_root: Path) -> ControlPlaneSettings:
    """Access open (no secret): what every other test of the registry runs with."""
    return ControlPlaneSettings(
        database_url=migrated_url,
        artifact_dir=tmp_path / "artifacts",
        base_model=DEFAULT_BASE_MODEL,
        max_lora_rank=16,
        source_roots=[source_root],
        dispatch_embeddings=False,
        health_checks=False,
        warmup=False,
        vllm_urls=["http://127.0.0.1:9"],  # nothing listens: /v1 completions answer 503
    )


@pytest.fixture
def closed_settings(base_settings: ControlPlaneSettings) -> ControlPlaneSettings:
    return base_settings.model_copy(
        update={
            "admin_token": SecretStr(ADMIN),
            "resolver_token": SecretStr(RESOLVER),
            "require_api_keys": True,
            "access_refresh_s": 0.2,
        }
    )


async def _client(app: ControlPlaneApp) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as http:
            yield http


@pytest.fixture
async def closed_app(closed_settings: ControlPlaneSettings) -> AsyncIterator[ControlPlaneApp]:
    app = create_app(closed_settings)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def closed(closed_app: ControlPlaneApp) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=closed_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://registry") as http:
        yield http


@pytest.fixture
async def open_client(base_settings: ControlPlaneSettings) -> AsyncIterator[httpx.AsyncClient]:
    async for http in _client(create_app(base_settings)):
        yield http
