from __future__ import annotations

import os
from pathlib import Path

import pytest

from registry.settings import ControlPlaneSettings


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DATABASE_URL", "BASE_MODEL", "VLLM_URLS", "PORT", "API_KEY", "ARTIFACT_DIR"):
        monkeypatch.delenv(f"HI_MOE_LORA_{name}", raising=False)
    settings = ControlPlaneSettings()
    assert settings.database_url == "sqlite:///./.hi-moe-lora/registry.db"
    assert settings.artifact_dir == Path("./.hi-moe-lora/artifacts")
    assert settings.max_lora_rank == 64
    assert settings.vllm_urls == ["http://127.0.0.1:8000"]
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert settings.base_model is None
    assert settings.api_key is None


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HI_MOE_LORA_BASE_MODEL", "/models/tiny")
    monkeypatch.setenv("HI_MOE_LORA_VLLM_URLS", '["http://a:8000", "http://b:8000"]')
    monkeypatch.setenv("HI_MOE_LORA_MAX_LORA_RANK", "16")
    monkeypatch.setenv("HI_MOE_LORA_API_KEY", "secret")
    settings = ControlPlaneSettings()
    assert settings.base_model == "/models/tiny"
    assert settings.vllm_urls == ["http://a:8000", "http://b:8000"]
    assert settings.max_lora_rank == 16
    assert settings.api_key is not None
    assert settings.api_key.get_secret_value() == "secret"
    assert "secret" not in repr(settings)


def test_rejects_nonsense(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HI_MOE_LORA_MAX_LORA_RANK", "0")
    with pytest.raises(ValueError, match="max_lora_rank"):
        ControlPlaneSettings()


def test_host_memory_must_hold_at_least_the_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HI_MOE_LORA_MAX_LORAS", "8")
    monkeypatch.setenv("HI_MOE_LORA_MAX_CPU_LORAS", "4")
    with pytest.raises(ValueError, match=r"max_cpu_loras \(4\) must be at least max_loras \(8\)"):
        ControlPlaneSettings()
    monkeypatch.setenv("HI_MOE_LORA_MAX_CPU_LORAS", "8")
    assert ControlPlaneSettings().max_cpu_loras == 8
    monkeypatch.delenv("HI_MOE_LORA_MAX_CPU_LORAS")
    assert ControlPlaneSettings().max_cpu_loras is None  # vLLM's default: max_loras


def test_to_env_renders_what_the_settings_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rendered = ControlPlaneSettings(
        database_url="postgresql+psycopg://cp@db/registry",
        artifact_dir=tmp_path / "artifacts",
        base_model="/models/tiny",
        max_lora_rank=16,
        max_cpu_loras=32,
        vllm_urls=["http://a:8000", "http://b:8000"],
        port=9090,
        api_key="secret",  # type: ignore[arg-type]
    )
    env = rendered.to_env()
    assert env["HI_MOE_LORA_VLLM_URLS"] == '["http://a:8000", "http://b:8000"]'
    assert env["HI_MOE_LORA_API_KEY"] == "secret"
    for name in list(os.environ):
        if name.startswith("HI_MOE_LORA_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert ControlPlaneSettings() == rendered


def test_unset_optional_settings_are_not_rendered() -> None:
    assert "HI_MOE_LORA_BASE_MODEL" not in ControlPlaneSettings(base_model=None).to_env()


def test_upstream_timeouts_and_the_deprecated_request_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("CONNECT", "READ", "UNLOAD"):
        monkeypatch.delenv(f"HI_MOE_LORA_UPSTREAM_{name}_TIMEOUT_S", raising=False)
    monkeypatch.delenv("HI_MOE_LORA_REQUEST_TIMEOUT_S", raising=False)
    defaults = ControlPlaneSettings()
    assert (
        defaults.upstream_connect_timeout_s,
        defaults.upstream_read_timeout_s,
        defaults.upstream_unload_timeout_s,
    ) == (3.0, 600.0, 10.0)
    monkeypatch.setenv("HI_MOE_LORA_REQUEST_TIMEOUT_S", "120")  # the former name still works
    assert ControlPlaneSettings().upstream_read_timeout_s == 120.0
    monkeypatch.setenv("HI_MOE_LORA_UPSTREAM_READ_TIMEOUT_S", "300")  # the new name wins
    assert ControlPlaneSettings().upstream_read_timeout_s == 300.0
    monkeypatch.delenv("HI_MOE_LORA_UPSTREAM_READ_TIMEOUT_S")
    rendered = ControlPlaneSettings(request_timeout_s=60).to_env()  # launchers pass it on
    assert rendered["HI_MOE_LORA_UPSTREAM_READ_TIMEOUT_S"] == "60.0"
