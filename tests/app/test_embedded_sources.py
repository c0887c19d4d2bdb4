"""What registers must load and serve: the tiny fleet's adapters under the registration checks.

The embedded stack serves the tiny Llama from a local directory, so registration checks every
tensor of an adapter against that model's config.json; the demo adapters must still register and
answer through vLLM, and a copy whose shapes do not fit must be refused on the same stack.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from hi_moe_lora.tinymodel import DEMO_ADAPTERS
from tests.conftest import VllmServer
from tests.support.adapter_files import lora_tensors, safetensors_bytes

pytestmark = pytest.mark.vllm


def _register(admin: httpx.Client, name: str, version: str, source: Path | str) -> httpx.Response:
    return admin.post(
        f"/adapters/{name}/versions", json={"version": version, "source": str(source)}
    )


def test_demo_adapters_register_and_serve_under_the_checks(
    vllm_server: VllmServer, admin: httpx.Client, fresh_name: Callable[[str], str]
) -> None:
    served: list[str] = []
    for kind, sources in sorted(vllm_server.adapters.items()):
        name = fresh_name(f"src-{kind}")
        for index, source in enumerate(sources):
            version = f"1.{index}.0"
            response = _register(admin, name, version, source)
            assert response.status_code == 201, response.text
            served.append(f"{name}@{version}")
    assert len(served) == len(DEMO_ADAPTERS)  # every demo adapter, AdaLoRA and DoRA included
    for model in served:
        body = {"model": model, "prompt": "def fibonacci(n):", "max_tokens": 4, "temperature": 0}
        response = httpx.post(
            f"{vllm_server.control_plane_url}/v1/completions", json=body, timeout=120
        )
        assert response.status_code == 200, (model, response.text)
        assert response.json()["model"] == model
        assert response.json()["choices"][0]["text"]


def test_shapes_are_checked_against_the_served_model(
    vllm_server: VllmServer, admin: httpx.Client, tmp_path: Path
) -> None:
    misfit = tmp_path / "misfit"
    shutil.copytree(vllm_server.adapters["python-lora"][0], misfit)
    # PEFT's names and a valid file, but hidden size 16 instead of the tiny model's 128
    tensors = lora_tensors(("q_proj", "k_proj", "v_proj", "o_proj"), rank=8)
    (misfit / "adapter_model.safetensors").write_bytes(safetensors_bytes(tensors))
    response = _register(admin, "src-misfit-lora", "1.0.0", misfit)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "tensor_shape_mismatch"
    assert str(tmp_path) not in response.text

    leaky = tmp_path / "leaky"
    shutil.copytree(vllm_server.adapters["python-lora"][0], leaky)
    (leaky / "adapter_model.safetensors").unlink()
    (leaky / "adapter_model.safetensors").symlink_to("/etc/passwd")
    response = _register(admin, "src-leaky-lora", "1.0.0", leaky)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "source_not_allowed"
    assert "root:" not in response.text
    assert str(tmp_path) not in response.text
    assert admin.get("/adapters/src-misfit-lora").status_code == 404
    assert admin.get("/adapters/src-leaky-lora").status_code == 404
