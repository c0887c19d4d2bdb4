"""ModelRouter: base model names, specialists (A/B aware) and pinned versions."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hi_moe_lora.app.processes import free_port
from registry.app import create_app
from registry.fleet.upstreams import UpstreamPool
from registry.openai.errors import ModelNotFound
from registry.openai.targets import ModelRouter, Target
from registry.openai.versions import VersionTable
from registry.services.adapters import AdapterService
from tests.openai.live import ServedApp, control_plane_settings
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter


class ModelsEndpoint:
    def __init__(self) -> None:
        self.calls = 0
        self.app = Starlette(routes=[Route("/v1/models", self.models)])

    async def models(self, request: Request) -> Response:
        self.calls += 1
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": "tiny", "object": "model", "parent": None},
                    {"id": "some-lora", "object": "model", "parent": "tiny"},
                ],
            }
        )


@pytest.fixture
def vllm_models() -> Iterator[tuple[ModelsEndpoint, ServedApp]]:
    endpoint = ModelsEndpoint()
    served = ServedApp(endpoint.app).start()
    yield endpoint, served
    served.stop()


@pytest.fixture
async def service(tmp_path: Path) -> AdapterService:
    settings = control_plane_settings(tmp_path, DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"])
    adapters = create_app(settings).components.adapters
    await adapters.register("spec", "1.0.0", str(write_adapter(tmp_path / "s1", seed=1)))
    await adapters.register("spec", "2.0.0", str(write_adapter(tmp_path / "s2", seed=2)))
    return adapters


@pytest.fixture
async def router(
    service: AdapterService, vllm_models: tuple[ModelsEndpoint, ServedApp]
) -> AsyncIterator[ModelRouter]:
    pool = UpstreamPool([vllm_models[1].url], read_timeout_s=5)
    yield ModelRouter(VersionTable(service, ttl_s=0), pool, DEFAULT_BASE_MODEL)
    await pool.aclose()


async def test_specialist_goes_to_its_active_version(router: ModelRouter) -> None:
    assert await router.route("spec") == Target("spec", "spec@1.0.0", "spec", "1.0.0")


async def test_pinned_version(router: ModelRouter) -> None:
    assert await router.route("spec@2.0.0") == Target("spec@2.0.0", "spec@2.0.0", "spec", "2.0.0")
    with pytest.raises(ModelNotFound):
        await router.route("spec@3.0.0")


async def test_ab_split_is_followed(router: ModelRouter, service: AdapterService) -> None:
    await service.set_traffic("spec", {"2.0.0": 1.0})
    assert (await router.route("spec")).served_name == "spec@2.0.0"
    await service.set_traffic("spec", {"2.0.0": 0.5})
    served = {(await router.route("spec")).served_name for _ in range(60)}
    assert served == {"spec@1.0.0", "spec@2.0.0"}


async def test_base_model_under_both_names(
    router: ModelRouter, vllm_models: tuple[ModelsEndpoint, ServedApp]
) -> None:
    # the configured name is forwarded as the name vLLM serves the base model under
    assert await router.route(DEFAULT_BASE_MODEL) == Target(DEFAULT_BASE_MODEL, "tiny")
    assert await router.route("tiny") == Target("tiny", "tiny")
    assert router.base_names == {DEFAULT_BASE_MODEL, "tiny"}
    assert vllm_models[0].calls == 1


async def test_unknown_names_refresh_vllms_models_at_most_once_per_ttl(
    router: ModelRouter, vllm_models: tuple[ModelsEndpoint, ServedApp]
) -> None:
    for _ in range(3):
        with pytest.raises(ModelNotFound) as caught:
            await router.route("nobody")
        assert caught.value.code == "model_not_found"
    assert vllm_models[0].calls == 1


async def test_base_is_forwarded_as_is_when_vllm_is_unreachable(
    service: AdapterService,
) -> None:
    pool = UpstreamPool([f"http://127.0.0.1:{free_port()}"], read_timeout_s=2)
    router = ModelRouter(VersionTable(service), pool, DEFAULT_BASE_MODEL)
    assert await router.route(DEFAULT_BASE_MODEL) == Target(DEFAULT_BASE_MODEL, DEFAULT_BASE_MODEL)
    await pool.aclose()


def test_target_headers() -> None:
    assert Target("a", "a@1.0.0", "a", "1.0.0").headers() == {
        "X-HiMoE-Served-Model": "a@1.0.0",
        "X-HiMoE-Adapter-Version": "1.0.0",
    }
    assert Target("base", "base").headers() == {"X-HiMoE-Served-Model": "base"}
