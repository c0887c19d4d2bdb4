from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hi_moe_lora.app.processes import ManagedProcess, free_port
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter


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


def _serve_refused(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``hi-moe-lora serve *args`` run to its (expected) refusal."""
    return subprocess.run(
        [sys.executable, "-m", "hi_moe_lora.app.cli", "serve", *args],
        env=_serve_env(tmp_path, free_port()),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_serve_refuses_a_database_that_is_not_at_head(tmp_path: Path) -> None:
    result = _serve_refused(tmp_path)
    assert result.returncode == 2
    assert "run `hi-moe-lora db upgrade`" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_with_migrate_starts_and_is_not_ready_without_vllm(tmp_path: Path) -> None:
    port = free_port()
    # Tier 3 off: loading the embedding model and encoding the catalogue's exemplars (10-20 s of
    # both cores) has nothing to do with --migrate or readiness; every embedded stack's
    # `hi-moe-lora serve` (tests/conftest.py, tests/operations) starts with it on.
    env = {**_serve_env(tmp_path, port), "HI_MOE_LORA_DISPATCH_EMBEDDINGS": "false"}
    server = ManagedProcess(
        "control plane",
        [sys.executable, "-m", "hi_moe_lora.app.cli", "serve", "--migrate"],
        tmp_path / "serve.log",
        env=env,
    )
    with server:
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


def test_workers_refuse_sqlite(tmp_path: Path) -> None:
    result = _serve_refused(tmp_path, "--migrate", "--workers", "2")
    assert result.returncode == 2
    assert "--workers > 1 needs PostgreSQL" in result.stderr
    assert "Traceback" not in result.stderr


def _dispatched_versions(url: str, times: int) -> set[str]:
    versions = set()
    for _ in range(times):  # a new connection each time: the kernel picks the worker
        answer = httpx.post(
            f"{url}/v1/dispatch", json={"objective": "fix the failing pytest in utils.py"}
        )
        assert answer.status_code == 200, answer.text
        versions.add(answer.json()["version"])
    return versions


def _client_requests(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "hi_moe_lora_client_requests_total":
                return float(sample.value)
    return 0.0


def test_two_workers_serve_one_registry_and_one_metrics(tmp_path: Path, postgres_url: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = _serve_env(tmp_path, port)
    env.update(
        {
            "HI_MOE_LORA_DATABASE_URL": postgres_url,
            "HI_MOE_LORA_BASE_MODEL": DEFAULT_BASE_MODEL,
            "HI_MOE_LORA_SOURCE_ROOTS": json.dumps([str(tmp_path)]),
            "HI_MOE_LORA_DISPATCH_EMBEDDINGS": "false",
            "HI_MOE_LORA_HEALTH_CHECKS": "false",
            "HI_MOE_LORA_WARMUP": "false",
        }
    )
    argv = [sys.executable, "-m", "hi_moe_lora.app.cli", "serve", "--migrate", "--workers", "2"]
    with ManagedProcess("control plane", argv, tmp_path / "serve.log", env=env) as server:
        server.wait_http_ok(f"{url}/healthz", timeout_s=120)
        for version, seed in (("1.0.0", 1), ("2.0.0", 2)):
            source = write_adapter(tmp_path / f"src-{version}", seed=seed)
            body = {"version": version, "source": str(source), "domains": ["python"]}
            answer = httpx.post(f"{url}/admin/v1/adapters/python-lora/versions", json=body)
            assert answer.status_code == 201, answer.text
        assert _dispatched_versions(url, 16) == {"1.0.0"}
        promoted = httpx.post(f"{url}/admin/v1/adapters/python-lora/versions/2.0.0/promote")
        assert promoted.status_code == 200, promoted.text
        # the worker that promoted applies it at once; the other hears it on the change feed
        deadline = time.monotonic() + 10
        while _dispatched_versions(url, 16) != {"2.0.0"}:
            assert time.monotonic() < deadline, "a worker kept routing the old version"
            time.sleep(0.2)
        # one /metrics for both workers: every scrape counts every worker's requests
        before = _client_requests(url)
        for _ in range(40):
            httpx.post(f"{url}/v1/completions", json={"model": "python-lora", "prompt": "p"})
        assert [_client_requests(url) for _ in range(6)] == [before + 40] * 6


def test_invalid_settings_get_a_short_answer_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hi_moe_lora.app.cli import main

    monkeypatch.setenv("HI_MOE_LORA_MAX_LORA_RANK", "0")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid control-plane settings:")
    assert "HI_MOE_LORA_MAX_LORA_RANK: Input should be greater than or equal to 1" in err
    monkeypatch.delenv("HI_MOE_LORA_MAX_LORA_RANK")
    monkeypatch.setenv("HI_MOE_LORA_MAX_LORAS", "8")
    monkeypatch.setenv("HI_MOE_LORA_MAX_CPU_LORAS", "4")
    assert main(["db", "current"]) == 2  # every command that reads the settings
    assert "max_cpu_loras (4) must be at least max_loras (8)" in capsys.readouterr().err
    monkeypatch.setenv("HI_MOE_LORA_ADMIN_TOKEN_SHA256", "not-a-digest")
    monkeypatch.delenv("HI_MOE_LORA_MAX_CPU_LORAS")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "HI_MOE_LORA_ADMIN_TOKEN_SHA256: String should match pattern" in err
    assert "not-a-digest" not in err  # values are not echoed (they may be secrets)
