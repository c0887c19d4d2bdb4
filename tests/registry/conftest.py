"""Registry fixtures: real SQLite files and real PostgreSQL schemas, a real app over ASGI."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.app import create_app
from registry.settings import ControlPlaneSettings
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter

MAX_RANK = 16
AdapterFactory = Callable[..., Path]


@pytest.fixture
def artifact_dir(tmp_path: Path) -> Path:
    return tmp_path / "artifacts"


@pytest.fixture
def source_root(tmp_path: Path) -> Path:
    """The one directory registration may read from (``make_adapter`` writes below it)."""
    return tmp_path / "sources"


@pytest.fixture
def settings(migrated_url: str, artifact_dir: Path, source_root: Path) -> ControlPlaneSettings:
    return ControlPlaneSettings(
        database_url=migrated_url,
        artifact_dir=artifact_dir,
        base_model=DEFAULT_BASE_MODEL,
        max_lora_rank=MAX_RANK,
        source_roots=[source_root],
        # tier 3 loads a sentence model: the dispatcher's own tests and the live stack use it
        dispatch_embeddings=False,
        # no vLLM behind these apps: the health monitor would find its upstream down
        health_checks=False,
        warmup=False,
    )


@pytest.fixture
def make_adapter(source_root: Path) -> AdapterFactory:
    """Write a PEFT adapter under ``source_root/<label>`` and return its directory."""

    def make(label: str = "adapter", **options: Any) -> Path:
        return write_adapter(source_root / label, **options)

    return make


@pytest.fixture
async def client(settings: ControlPlaneSettings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://registry") as http:
            yield http
