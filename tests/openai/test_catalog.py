"""``GET /v1/models``: base model, adapters and their versions in OpenAI list format."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from hi_moe_lora.app.processes import free_port
from tests.conftest import VllmServer
from tests.openai.live import ServedApp, control_plane_settings, register, serve_control_plane
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ServedApp]:
    settings = control_plane_settings(
        tmp_path, DEFAULT_BASE_MODEL, [f"http://127.0.0.1:{free_port()}"], upstream_read_timeout_s=5
    )
    served = serve_control_plane(settings)
    yield served
    served.stop()


def _list(url: str) -> dict[str, Any]:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client:
        return {model.id: model for model in client.models.list()}


def test_lists_base_adapters_and_versions(plane: ServedApp, tmp_path: Path) -> None:
    assert set(_list(plane.url)) == {DEFAULT_BASE_MODEL}
    register(plane.url, "alpha", "1.0.0", write_adapter(tmp_path / "a1", seed=1))
    register(plane.url, "alpha", "1.1.0", write_adapter(tmp_path / "a2", seed=2))
    register(plane.url, "beta", "0.1.0", write_adapter(tmp_path / "b1", seed=3))

    models = _list(plane.url)
    assert set(models) == {
        DEFAULT_BASE_MODEL,
        "alpha",
        "alpha@1.0.0",
        "alpha@1.1.0",
        "beta",
        "beta@0.1.0",
    }
    for model in models.values():
        assert model.object == "model"
        assert model.owned_by == "hi-moe-lora"
    alpha = models["alpha"].model_dump()
    assert alpha["parent"] == DEFAULT_BASE_MODEL
    assert alpha["active_version"] == "1.0.0"
    assert models["alpha@1.1.0"].model_dump()["status"] == "inactive"
    assert models["alpha"].created > 0


@pytest.mark.vllm
def test_lists_what_vllm_serves_as_base(
    vllm_server: VllmServer,
    fresh_name: Callable[[str], str],
    register_demo: Callable[..., dict[str, Any]],
) -> None:
    name = fresh_name("cat")
    register_demo(name, "1.0.0")
    models = _list(vllm_server.control_plane_url)
    assert vllm_server.base_model in models
    assert {name, f"{name}@1.0.0"} <= set(models)
