from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def test_serve_with_migrate_starts_and_answers_readyz(tmp_path: Path) -> None:
    port = free_port()
    server = ManagedProcess(
        "control plane",
        [sys.executable, "-m", "hi_moe_lora.app.cli", "serve", "--migrate"],
        tmp_path / "serve.log",
        env=_serve_env(tmp_path, port),
    )
    with server:
        server.wait_http_ok(f"http://127.0.0.1:{port}/readyz", timeout_s=60)
    assert (tmp_path / "registry.db").is_file()
