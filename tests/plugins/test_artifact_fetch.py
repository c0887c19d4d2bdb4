"""The resolver with an artifact cache, against a real control plane (uvicorn, SQLite).

"This host" has no copy of the registry's files when the test moves the store's directory away:
the resolver must download the version over HTTP and return the verified cached path; with the
registry's path present and matching it must use that path and download nothing.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from vllm.lora.request import LoRARequest

from hi_moe_lora.adapters.checksum import adapter_sha256
from plugins.artifact_fetch import VllmModels, request_path
from plugins.metrics import (
    ARTIFACT_CACHE_HITS,
    ARTIFACT_DOWNLOAD_BYTES,
    ARTIFACT_DOWNLOADS,
    PluginMetrics,
)
from plugins.resolver import HiMoeLoraResolver
from plugins.settings import PluginSettings
from tests.openai.live import ServedApp, control_plane_settings, serve_control_plane
from tests.openai.live import register as register_version
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    workdir = tmp_path_factory.mktemp("registry")
    settings = control_plane_settings(workdir, DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"])
    served = serve_control_plane(settings)
    yield served
    served.stop()


def _resolver(
    url: str, cache: Path, metrics: PluginMetrics, budget: int = 1 << 30
) -> HiMoeLoraResolver:
    settings = PluginSettings(
        registry_url=url, artifact_cache_dir=str(cache), artifact_cache_bytes=budget
    )
    return HiMoeLoraResolver(settings, metrics=metrics)


def _value(text: str, family: str, label: str = "") -> float:
    for line in text.splitlines():
        if line.startswith(family) and label in line and not line.startswith("#"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_fetches_a_version_not_on_this_host(
    registry: ServedApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = register_version(registry.url, "far-a", "1.0.0", write_adapter(tmp_path / "a", seed=5))
    stored = Path(info["local_path"])
    hidden = tmp_path / "elsewhere"
    shutil.move(stored, hidden)  # the control plane still serves it: move it back below
    try:
        assert not stored.exists()
        prom = CollectorRegistry()
        resolver = _resolver(registry.url, tmp_path / "cache", PluginMetrics(prom))
        # the files are gone from the control plane too: the fetch fails and declines
        assert asyncio.run(resolver.resolve_lora(DEFAULT_BASE_MODEL, "far-a@1.0.0")) is None
        assert _value(generate_latest(prom).decode(), ARTIFACT_DOWNLOADS, 'outcome="error"') == 1
    finally:
        shutil.move(hidden, stored)
    # now the control plane has them, but the resolver is told the path is elsewhere
    sha = adapter_sha256(stored)
    prom = CollectorRegistry()
    resolver = _resolver(registry.url, tmp_path / "cache", PluginMetrics(prom))
    original = resolver._client.resolve

    def moved(name: str):  # type: ignore[no-untyped-def]
        answer = original(name)
        import dataclasses

        return dataclasses.replace(answer, local_path="/nonexistent/host/path")

    monkeypatch.setattr(resolver._client, "resolve", moved)  # answers as for another host
    request = asyncio.run(resolver.resolve_lora(DEFAULT_BASE_MODEL, "far-a@1.0.0"))
    assert isinstance(request, LoRARequest)
    cached = Path(request_path(request) or "")
    assert cached == (tmp_path / "cache").resolve() / sha
    assert adapter_sha256(cached) == sha
    text = generate_latest(prom).decode()
    assert _value(text, ARTIFACT_DOWNLOADS, 'outcome="downloaded"') == 1
    size = sum(p.stat().st_size for p in stored.iterdir())
    assert _value(text, ARTIFACT_DOWNLOAD_BYTES) == size
    again = asyncio.run(resolver.resolve_lora(DEFAULT_BASE_MODEL, "far-a@1.0.0"))
    assert again is not None
    assert request_path(again) == str(cached)
    text = generate_latest(prom).decode()
    assert _value(text, ARTIFACT_CACHE_HITS, 'source="cache"') == 1
    assert _value(text, ARTIFACT_DOWNLOADS, 'outcome="downloaded"') == 1


def test_a_matching_local_path_downloads_nothing(registry: ServedApp, tmp_path: Path) -> None:
    info = register_version(registry.url, "near-a", "1.0.0", write_adapter(tmp_path / "a", seed=6))
    prom = CollectorRegistry()
    resolver = _resolver(registry.url, tmp_path / "cache", PluginMetrics(prom))
    request = asyncio.run(resolver.resolve_lora(DEFAULT_BASE_MODEL, "near-a@1.0.0"))
    assert request is not None
    assert request_path(request) == str(Path(info["local_path"]).resolve())
    text = generate_latest(prom).decode()
    assert _value(text, ARTIFACT_CACHE_HITS, 'source="local_path"') == 1
    assert _value(text, ARTIFACT_DOWNLOADS, 'outcome="downloaded"') == 0
    assert resolver.fetcher is not None
    assert resolver.fetcher.cache.entries() == []


class FakeServingModels:
    """The shape of vLLM's OpenAIServingModels that the plugin relies on (a real vLLM is in
    the vllm-marked tests of the resolver): it calls the resolver and keeps loaded names."""

    def __init__(self, resolver: HiMoeLoraResolver) -> None:
        self.lora_resolvers = [resolver]
        self.lora_requests: dict[str, LoRARequest] = {}

    async def resolve_lora(self, name: str) -> LoRARequest | None:
        request = await self.lora_resolvers[0].resolve_lora(DEFAULT_BASE_MODEL, name)
        if request is not None:
            self.lora_requests[name] = request
        return request

    async def unload_lora_adapter(self, request: object) -> str:
        del self.lora_requests[request.lora_name]  # type: ignore[attr-defined]
        return "Success"


def test_finds_vllms_loaded_names_and_releases_them_before_eviction(
    registry: ServedApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    infos = [
        register_version(
            registry.url, f"evict-{i}", "1.0.0", write_adapter(tmp_path / f"e{i}", seed=40 + i)
        )
        for i in range(3)
    ]
    size = max(sum(p.stat().st_size for p in Path(i["local_path"]).iterdir()) for i in infos)
    prom = CollectorRegistry()
    resolver = _resolver(registry.url, tmp_path / "cache", PluginMetrics(prom), budget=2 * size)
    original = resolver._client.resolve
    elsewhere = lambda n: dataclasses.replace(original(n), local_path="/nonexistent")  # noqa: E731
    monkeypatch.setattr(resolver._client, "resolve", elsewhere)  # as for another host
    assert resolver.fetcher is not None
    resolver.fetcher._grace_s = 0.0  # vLLM "loaded" at once: only its names count
    models = FakeServingModels(resolver)

    async def scenario() -> None:
        for i in range(3):
            assert await models.resolve_lora(f"evict-{i}@1.0.0") is not None

    asyncio.run(scenario())
    assert isinstance(resolver._models, VllmModels)
    # the oldest loaded version was released (vLLM forgot its name) to keep the budget
    assert "evict-0@1.0.0" not in models.lora_requests
    assert set(models.lora_requests) == {"evict-1@1.0.0", "evict-2@1.0.0"}
    assert resolver.fetcher.cache.total_bytes() <= 2 * size
    assert (
        _value(
            generate_latest(prom).decode(),
            "hi_moe_lora_artifact_cache_evictions_total",
            'kind="in_use"',
        )
        == 1
    )
