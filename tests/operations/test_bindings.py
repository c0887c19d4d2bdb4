"""Foreign bindings: names of ours that a vLLM replica binds to weights the registry did not issue.

First against a scripted vLLM (its ``/v1/models`` cards and its unload answer under the test's
control; real HTTP, a real control plane on SQLite), then against the real vLLM CPU server of
the operations stack, where the names are rebound on vLLM's own port as an intruder would.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.tinymodel import TinyFleet
from tests.metrics.scrape import value
from tests.openai.live import ServedApp, control_plane_settings, register, serve_control_plane
from tests.operations.conftest import HEALTH_INTERVAL_S, demo_adapter
from tests.operations.live import eventually, health, metrics_text, vllm_models
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter

KEY = "scripted-vllm-key"


class _ScriptedVllm:
    """vLLM's HTTP surface with LoRA cards the test sets; records every Authorization header."""

    def __init__(self) -> None:
        self.cards: dict[str, str] = {}
        self.unload_status = 200
        self.unloads: list[str] = []
        self.authorizations: dict[str, set[str | None]] = {}
        self.app = Starlette(
            routes=[
                Route("/health", self.health),
                Route("/v1/models", self.models),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/unload_lora_adapter", self.unload, methods=["POST"]),
            ]
        )

    def _seen(self, request: Request) -> None:
        self.authorizations.setdefault(request.url.path, set()).add(
            request.headers.get("authorization")
        )

    async def health(self, request: Request) -> Response:
        self._seen(request)
        return JSONResponse({})

    async def models(self, request: Request) -> Response:
        self._seen(request)
        cards: list[dict[str, Any]] = [{"id": DEFAULT_BASE_MODEL, "root": DEFAULT_BASE_MODEL}]
        cards += [
            {"id": name, "root": root, "parent": DEFAULT_BASE_MODEL}
            for name, root in self.cards.items()
        ]
        return JSONResponse({"object": "list", "data": cards})

    async def completions(self, request: Request) -> Response:
        self._seen(request)
        body = await request.json()
        return JSONResponse({"choices": [{"index": 0, "text": f"from {body['model']}"}]})

    async def unload(self, request: Request) -> Response:
        self._seen(request)
        name = (await request.json())["lora_name"]
        self.unloads.append(name)
        if self.unload_status == 200:
            self.cards.pop(name, None)
        return JSONResponse({"error": {"message": "scripted"}}, status_code=self.unload_status)


def _picture(url: str) -> dict[str, Any]:
    upstream: dict[str, Any] = httpx.get(f"{url}/v1/health", timeout=10).json()["upstreams"][0]
    return upstream


def _complete(url: str, model: str) -> httpx.Response:
    body = {"model": model, "prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0.0}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=120)


def test_foreign_bindings_are_quarantined_and_unloaded_and_other_names_left_alone(
    tmp_path: Path,
) -> None:
    vllm = _ScriptedVllm()
    upstream = ServedApp(vllm.app).start()
    settings = control_plane_settings(
        tmp_path / "plane",
        DEFAULT_BASE_MODEL,
        [upstream.url],
        health_checks=True,
        health_interval_s=3600.0,  # rounds only at start and after fleet changes
        api_key=KEY,
    )
    plane = serve_control_plane(settings)
    try:
        url = plane.url
        info = register(url, "spec", "1.0.0", write_adapter(tmp_path / "src"))
        issued = info["local_path"]
        cached = register(url, "cached", "1.0.0", write_adapter(tmp_path / "c", seed=3))
        host_cache = tmp_path / "host-cache"  # a replica without the artifact store
        vllm.cards = {
            "spec@1.0.0": str(tmp_path / "evil"),  # rebound to other weights
            "spec": issued + "/",  # the registry's weights (paths are compared normalised)
            "ghost@2.0.0": issued,  # in our namespace, unknown to the registry
            # the resolver's verified download, named by the version's checksum: issued
            "cached@1.0.0": str(host_cache / cached["sha256"]),
            "cached": str(host_cache / ("0" * 64)),  # a checksum the registry never issued
            "Team/Model": str(tmp_path / "theirs"),  # outside our namespace
        }
        vllm.unload_status = 500  # vLLM fails to unload at first
        register(url, "trigger-a", "1.0.0", write_adapter(tmp_path / "a", seed=1))  # a round
        picture = eventually(lambda: _picture(url), lambda p: len(p["foreign_bindings"]) == 3, 10)
        foreign = {f["served_name"]: f for f in picture["foreign_bindings"]}
        assert set(foreign) == {"spec@1.0.0", "ghost@2.0.0", "cached"}
        assert not foreign["spec@1.0.0"]["removed"]
        assert "did not issue" in foreign["spec@1.0.0"]["reason"]
        assert "does not know" in foreign["ghost@2.0.0"]["reason"]
        assert picture["other_adapters"] == ["Team/Model"]
        assert httpx.get(f"{url}/v1/health", timeout=10).json()["status"] == "degraded"
        # while vLLM still binds the name to foreign weights, the front door does not forward it
        refused = _complete(url, "spec@1.0.0")
        assert refused.status_code == 503, refused.text
        assert "did not issue" in refused.json()["error"]["message"]
        text = metrics_text_of(url)
        assert value(text, "hi_moe_lora_foreign_bindings_total", outcome="failed") >= 2

        vllm.unload_status = 200
        register(url, "trigger-b", "1.0.0", write_adapter(tmp_path / "b", seed=2))  # a round
        picture = eventually(
            lambda: _picture(url),
            lambda p: p["foreign_bindings"] and all(f["removed"] for f in p["foreign_bindings"]),
            10,
        )
        assert all(f["removed"] for f in picture["foreign_bindings"]), picture
        # the issued ones and the outside one stay
        assert set(vllm.cards) == {"spec", "cached@1.0.0", "Team/Model"}
        assert set(vllm.unloads) == {"spec@1.0.0", "ghost@2.0.0", "cached"}
        served = _complete(url, "spec@1.0.0")
        assert served.status_code == 200, served.text
        assert (
            value(metrics_text_of(url), "hi_moe_lora_foreign_bindings_total", outcome="unloaded")
            == 3
        )
        # everything the control plane sent vLLM carried vLLM's key
        for path in ("/health", "/v1/models", "/v1/completions", "/v1/unload_lora_adapter"):
            assert vllm.authorizations[path] == {f"Bearer {KEY}"}, path
    finally:
        plane.stop()
        upstream.stop()


def metrics_text_of(url: str) -> str:
    answer = httpx.get(f"{url}/metrics", timeout=10)
    answer.raise_for_status()
    return answer.text


# ------------------------------------------------------------------ the real vLLM (CPU)


def _load(stack: EmbeddedStack, name: str, path: Path, **extra: Any) -> httpx.Response:
    """``POST /v1/load_lora_adapter`` on vLLM's own port, with its key (as a holder of the key,
    or anyone when vLLM runs without one)."""
    body = {"lora_name": name, "lora_path": str(path), **extra}
    return httpx.post(
        f"{stack.vllm_url}/v1/load_lora_adapter",
        json=body,
        headers=stack.vllm_headers,
        timeout=120,
    )


def _direct(stack: EmbeddedStack, model: str) -> str:
    body = {"model": model, "prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0.0}
    answer = httpx.post(
        f"{stack.vllm_url}/v1/completions", json=body, headers=stack.vllm_headers, timeout=120
    )
    assert answer.status_code == 200, answer.text
    text: str = answer.json()["choices"][0]["text"]
    return text


def _unloaded(stack: EmbeddedStack) -> float:
    """Foreign bindings the control plane has unloaded so far (its counter).

    The live tests wait on this, not on the health picture: the picture shows a removed
    binding only until the next round (about one interval later) finds the name unbound or
    bound to the registry's weights again, and a poll on a busy 2-core host once missed that
    window. The picture's record is checked against the scripted vLLM above."""
    text = metrics_text(stack)
    return value(text, "hi_moe_lora_foreign_bindings_total", outcome="unloaded")


@pytest.mark.vllm
def test_a_name_rebound_on_vllms_port_is_unloaded_in_a_round_and_the_registry_weights_served(
    ops_stack: EmbeddedStack, tiny_fleet: TinyFleet
) -> None:
    url = ops_stack.control_plane_url
    served = "rebound@1.0.0"
    register(url, "rebound", "1.0.0", demo_adapter(tiny_fleet, "python-lora"))
    eventually(lambda: vllm_models(ops_stack), lambda names: served in names)
    ours = _complete(url, served)
    assert ours.status_code == 200, ours.text
    expected = ours.json()["choices"][0]["text"]
    foreign_weights = demo_adapter(tiny_fleet, "math-lora")
    # the intruder's weights answer differently (loaded under a name outside our namespace,
    # which the monitor leaves alone)
    assert _load(ops_stack, "Intruder/Math", foreign_weights).status_code == 200
    assert _direct(ops_stack, "Intruder/Math") != expected

    before = _unloaded(ops_stack)
    rebound = _load(ops_stack, served, foreign_weights, load_inplace=True)
    assert rebound.status_code == 200, rebound.text
    rebound_at = time.monotonic()
    assert eventually(lambda: _unloaded(ops_stack), lambda n: n > before, 30) == before + 1
    assert time.monotonic() - rebound_at < 3 * HEALTH_INTERVAL_S + 15  # one round, plus probes
    # the front door serves the registry's weights again (vLLM asks the resolver afresh)
    again = _complete(url, served)
    assert again.status_code == 200, again.text
    assert again.json()["choices"][0]["text"] == expected
    picture = health(ops_stack)["upstreams"][0]
    assert "Intruder/Math" in picture["other_adapters"]
    assert "Intruder/Math" in vllm_models(ops_stack)


@pytest.mark.vllm
def test_vllm_refuses_every_call_without_its_key_and_the_control_plane_sends_it(
    ops_stack: EmbeddedStack, tiny_fleet: TinyFleet
) -> None:
    assert ops_stack.vllm_api_key
    vllm = ops_stack.vllm_url
    url = ops_stack.control_plane_url
    register(url, "keyed", "1.0.0", demo_adapter(tiny_fleet, "python-lora"))
    weights = str(demo_adapter(tiny_fleet, "math-lora"))
    load = {"lora_name": "keyed@1.0.0", "lora_path": weights, "load_inplace": True}
    sagemaker_load = {"name": "sneaked@1.0.0", "src": weights}
    calls = (
        ("POST", "/v1/load_lora_adapter", load),  # vLLM's own check
        ("POST", "/v1/unload_lora_adapter", {"lora_name": "keyed@1.0.0"}),
        ("POST", "/v1/completions", {"model": "keyed@1.0.0", "prompt": "x", "max_tokens": 1}),
        ("GET", "/v1/models", None),
        ("POST", "/adapters", sagemaker_load),  # vLLM leaves these open: our port guard
        ("DELETE", "/adapters/keyed@1.0.0", None),
        ("POST", "/invocations", {"prompt": "x", "max_tokens": 1}),
        ("POST", "/tokenize", {"prompt": "x"}),
    )
    for method, path, payload in calls:
        answer = httpx.request(method, f"{vllm}{path}", json=payload, timeout=60)
        assert answer.status_code == 401, (path, answer.text)
        wrong = httpx.request(
            method,
            f"{vllm}{path}",
            json=payload,
            headers={"Authorization": "Bearer wrong"},
            timeout=60,
        )
        assert wrong.status_code == 401, path
    assert httpx.get(f"{vllm}/health", timeout=30).status_code == 200  # liveness stays open
    # the control plane holds the key: its health checks pass and the front door serves
    assert httpx.get(f"{url}/readyz", timeout=30).status_code == 200
    assert _complete(url, "keyed@1.0.0").status_code == 200
    # a holder of the key loading through SageMaker's route is caught like any other
    before = _unloaded(ops_stack)
    sneaked = httpx.post(
        f"{vllm}/adapters", json=sagemaker_load, headers=ops_stack.vllm_headers, timeout=60
    )
    assert sneaked.status_code == 200, sneaked.text
    assert eventually(lambda: _unloaded(ops_stack), lambda n: n > before, 30) == before + 1
    assert "sneaked@1.0.0" not in vllm_models(ops_stack)
