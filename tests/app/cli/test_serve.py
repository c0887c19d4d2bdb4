from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from hi_moe_lora.app.processes import ManagedProcess, free_port


def _serve_env(tmp_path: Path, port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "HI_MOE_LORA_DATABASE_URL": f"sqlite:///{tmp_path / 'registry.db'}",
            "HI_MOE_LORA_ARTIFACT_DIR": str(tmp_path / "artifacts"),
            "HI_MOE_LORA_PORT": str(port),
            "HI_MOE_LORA_VLLM_URLS": '["http://127.0.0.1:9"]',
        }
    )
    return env


def test_serve_refuses_a_database_that_is_not_at_head(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hi_moe_lora.app.cli", "serve"],
        env=_serve_env(tmp_path, free_port()),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "run `hi-moe-lora db upgrade`" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_with_migrate_starts_and_is_not_ready_without_vllm(tmp_path: Path) -> None:
    port = free_port()
    server = ManagedProcess(
        "control plane",
        [sys.executable, "-m", "hi_moe_lora.app.cli", "serve", "--migrate"],
        tmp_path / "serve.log",
        env=_serve_env(tmp_path, port),
    )
    with server:
        # start-up loads the embedding model and encodes the catalogue's exemplars
        server.wait_http_ok(f"http://127.0.0.1:{port}/healthz", timeout_s=120)
        # no vLLM at the configured URL: alive, migrated, but not ready, and it says why
        deadline = time.monotonic() + 30
        while True:
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
            if ready.json().get("code") == "no_healthy_upstream" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert ready.status_code == 503
        assert ready.json()["code"] == "no_healthy_upstream"
        assert "ConnectError" in ready.json()["detail"]
    assert (tmp_path / "registry.db").is_file()
