"""Plugin settings read from the environment (stdlib dataclass, no pydantic)."""

from __future__ import annotations

import pytest

from plugins.settings import (
    DEFAULT_RESOLVER_TIMEOUT_S,
    ENV_COMPILE_THREADS,
    ENV_DORA,
    ENV_FUSED_GEMM,
    ENV_KERNELS,
    ENV_NARROW_B,
    ENV_REGISTRY_URL,
    ENV_RESOLVER_TIMEOUT_S,
    PluginSettings,
    PluginSettingsError,
)


def test_defaults_when_nothing_is_set() -> None:
    settings = PluginSettings.from_env({})
    assert settings.registry_url is None
    assert not settings.resolver_enabled
    assert settings.resolver_timeout_s == DEFAULT_RESOLVER_TIMEOUT_S == 10.0
    assert settings.kernels == "ours"
    assert settings.dora
    assert settings.narrow_b
    assert settings.fused_gemm == "auto"
    assert settings.compile_threads is None  # (auto)


def test_reads_every_variable() -> None:
    settings = PluginSettings.from_env(
        {
            ENV_REGISTRY_URL: " http://registry:8080/ ",
            ENV_RESOLVER_TIMEOUT_S: "2.5",
            ENV_KERNELS: "VLLM",
            ENV_DORA: " OFF ",
            ENV_NARROW_B: "off",
            ENV_FUSED_GEMM: " On",
        }
    )
    assert settings.registry_url == "http://registry:8080"
    assert settings.resolver_enabled
    assert settings.resolver_timeout_s == 2.5
    assert settings.kernels == "vllm"
    assert not settings.dora
    assert not settings.narrow_b
    assert settings.fused_gemm == "on"


@pytest.mark.parametrize("choice", ["ours", "vllm", "reference"])
def test_every_kernels_choice_is_accepted(choice: str) -> None:
    assert PluginSettings.from_env({ENV_KERNELS: f" {choice.upper()} "}).kernels == choice


def test_empty_values_count_as_unset() -> None:
    settings = PluginSettings.from_env(
        {ENV_REGISTRY_URL: " ", ENV_RESOLVER_TIMEOUT_S: "", ENV_KERNELS: ""}
    )
    assert settings == PluginSettings.from_env({})


def test_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_REGISTRY_URL, "https://registry.example")
    monkeypatch.setenv(ENV_KERNELS, "vllm")
    settings = PluginSettings.from_env()
    assert settings.registry_url == "https://registry.example"
    assert settings.kernels == "vllm"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        (ENV_REGISTRY_URL, "registry:8080"),
        (ENV_REGISTRY_URL, "ftp://registry"),
        (ENV_RESOLVER_TIMEOUT_S, "soon"),
        (ENV_RESOLVER_TIMEOUT_S, "0"),
        (ENV_RESOLVER_TIMEOUT_S, "-1"),
        (ENV_RESOLVER_TIMEOUT_S, "nan"),
        (ENV_RESOLVER_TIMEOUT_S, "inf"),
        (ENV_KERNELS, "triton"),
        (ENV_DORA, "yes"),
        (ENV_NARROW_B, "1"),
        (ENV_FUSED_GEMM, "yes"),
        (ENV_COMPILE_THREADS, "-2"),
        (ENV_COMPILE_THREADS, "many"),
    ],
)
def test_rejects_malformed_values(variable: str, value: str) -> None:
    with pytest.raises(PluginSettingsError) as caught:
        PluginSettings.from_env({variable: value})
    assert caught.value.variable == variable
    assert variable in str(caught.value)


def test_is_frozen() -> None:
    settings = PluginSettings.from_env({})
    with pytest.raises(AttributeError):
        settings.kernels = "vllm"  # type: ignore[misc]


@pytest.mark.parametrize(
    "settings",
    [
        PluginSettings(),
        PluginSettings(registry_url="https://registry:8443", resolver_timeout_s=0.25),
        PluginSettings(registry_url="http://r", kernels="reference", dora=False),
        PluginSettings(narrow_b=False),
        PluginSettings(fused_gemm="on"),
        PluginSettings(fused_gemm="off"),
        PluginSettings(compile_threads=None),
        PluginSettings(compile_threads=6),
        PluginSettings(compile_threads=0),
    ],
)
def test_to_env_renders_what_from_env_reads(settings: PluginSettings) -> None:
    env = settings.to_env()
    assert set(env) <= {
        ENV_REGISTRY_URL,
        ENV_RESOLVER_TIMEOUT_S,
        ENV_KERNELS,
        ENV_DORA,
        ENV_NARROW_B,
        ENV_FUSED_GEMM,
        ENV_COMPILE_THREADS,
    }
    assert PluginSettings.from_env(env) == settings


def test_resolver_token_round_trips_and_stays_out_of_repr() -> None:
    from plugins.settings import ENV_RESOLVER_TOKEN

    settings = PluginSettings.from_env({ENV_RESOLVER_TOKEN: " hml_secret "})
    assert settings.resolver_token == "hml_secret"
    assert "hml_secret" not in repr(settings)
    assert settings.to_env()[ENV_RESOLVER_TOKEN] == "hml_secret"
    assert ENV_RESOLVER_TOKEN not in PluginSettings.from_env({}).to_env()


def test_from_env_or_defaults_falls_back_to_every_default_on_a_malformed_value() -> None:
    assert PluginSettings.from_env_or_defaults({ENV_FUSED_GEMM: "on"}).fused_gemm == "on"
    fallback = PluginSettings.from_env_or_defaults({ENV_FUSED_GEMM: "on", ENV_NARROW_B: "1"})
    assert fallback == PluginSettings()


@pytest.mark.parametrize("choice", ["auto", "on", "off"])
def test_every_fused_gemm_choice_is_accepted(choice: str) -> None:
    assert PluginSettings.from_env({ENV_FUSED_GEMM: f" {choice.upper()} "}).fused_gemm == choice


def test_compile_threads_auto_is_this_hosts_cpus_at_most_sixteen() -> None:
    import os

    from plugins.settings import MAX_AUTO_COMPILE_THREADS

    auto = PluginSettings.from_env({ENV_COMPILE_THREADS: " Auto "})
    assert auto.compile_threads is None
    assert auto.compile_thread_count == min(len(os.sched_getaffinity(0)), MAX_AUTO_COMPILE_THREADS)
    assert PluginSettings.from_env({}).compile_threads is None  # (auto by default)
    assert PluginSettings.from_env({ENV_COMPILE_THREADS: "0"}).compile_thread_count == 0
    assert PluginSettings.from_env({ENV_COMPILE_THREADS: "24"}).compile_thread_count == 24
