"""A real control plane (``create_app`` on SQLite) served by uvicorn in a background thread.

Tests of the front door and of the resolver plugin talk to it over real HTTP.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from hi_moe_lora.app.processes import StartStop, free_port
from hi_moe_lora.control_api import ControlPlaneClient
from registry.app import create_app
from registry.db.migrate import upgrade_to_head
from registry.settings import ControlPlaneSettings

START_TIMEOUT_S = 30.0


class ServedApp(StartStop):
    """Any ASGI app on ``127.0.0.1:<free port>`` in a daemon thread.

    ``graceful_shutdown_s``: how long :meth:`stop` lets requests still running finish before
    uvicorn cancels them (``None``: until they finish). For scripted upstreams that hang on
    purpose, so that stopping one does not wait out its hang."""

    def __init__(self, app: Any, *, graceful_shutdown_s: int | None = None) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=graceful_shutdown_s,
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServedApp:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=15)


def control_plane_settings(
    workdir: Path, base_model: str, vllm_urls: list[str], **overrides: Any
) -> ControlPlaneSettings:
    """Settings for a fresh control plane under ``workdir`` (database migrated to head)."""
    workdir.mkdir(parents=True, exist_ok=True)
    settings = ControlPlaneSettings(
        database_url=f"sqlite:///{workdir / 'registry.db'}",
        artifact_dir=workdir / "artifacts",
        base_model=base_model,
        vllm_urls=vllm_urls,
        # tests write their adapters beside ``workdir`` (in the test's temporary tree)
        source_roots=[workdir.parent],
        **{"dispatch_embeddings": False, "health_checks": False, "warmup": False, **overrides},
    )
    upgrade_to_head(settings.database_url)
    return settings


def serve_control_plane(settings: ControlPlaneSettings) -> ServedApp:
    return ServedApp(create_app(settings)).start()


def register(
    control_plane_url: str, name: str, version: str, source: Path, *, promote: bool = False
) -> dict[str, Any]:
    """Register ``source`` as ``name@version`` through the admin API (and optionally promote)."""
    client = ControlPlaneClient(control_plane_url, timeout_s=60)
    info = client.register(name, version, str(source))
    if promote and not info["is_active"]:
        info = client.promote(name, version)
    return info
