"""After promote/rollback the control plane makes every vLLM replica forget the bare name."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hi_moe_lora.app.processes import free_port
from registry.fleet.invalidation import UNLOAD_PATH, BareNameInvalidator
from registry.fleet.upstreams import UpstreamPool
from tests.conftest import VllmServer
from tests.openai.live import ServedApp

PROMPT = "def fibonacci(n):"


class UnloadRecorder:
    """A replica's ``/v1/unload_lora_adapter`` answering a fixed status."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.names: list[str] = []
        self.app = Starlette(routes=[Route(UNLOAD_PATH, self.unload, methods=["POST"])])

    async def unload(self, request: Request) -> Response:
        self.names.append((await request.json())["lora_name"])
        return JSONResponse({"error": {"message": "status", "code": self.status}}, self.status)


@pytest.fixture
def replicas() -> Iterator[list[tuple[UnloadRecorder, ServedApp]]]:
    made = []
    for status in (200, 404, 500):
        recorder = UnloadRecorder(status)
        made.append((recorder, ServedApp(recorder.app).start()))
    yield made
    for _, served in made:
        served.stop()


async def test_every_replica_is_asked_and_failures_are_only_logged(
    replicas: list[tuple[UnloadRecorder, ServedApp]], caplog: pytest.LogCaptureFixture
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    pool = UpstreamPool([s.url for _, s in replicas] + [closed], request_timeout_s=5)
    caplog.set_level(logging.DEBUG, logger="registry.fleet.invalidation")
    await BareNameInvalidator(pool)("python-lora")
    await pool.aclose()
    assert [recorder.names for recorder, _ in replicas] == [["python-lora"]] * 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # the 404 ("was not loaded") is expected; the 500 and the closed port are not
    assert len(warnings) == 2
    assert any("HTTP 500" in w for w in warnings)
    assert any(closed in w for w in warnings)


# ------------------------------------------------------------------ real vLLM


def _complete(client: openai.OpenAI, model: str) -> tuple[str, str]:
    raw = client.completions.with_raw_response.create(
        model=model, prompt=PROMPT, max_tokens=8, temperature=0.0
    )
    completion = raw.parse()
    served = raw.headers.get("x-himoe-served-model", completion.model)
    return served, completion.choices[0].text


def _vllm_models(vllm_server: VllmServer) -> set[str]:
    data = httpx.get(f"{vllm_server.url}/v1/models", timeout=30).json()["data"]
    return {card["id"] for card in data}


@pytest.mark.vllm
def test_promote_and_rollback_switch_the_very_next_request(
    gateway: openai.OpenAI,
    admin: httpx.Client,
    fresh_name: Callable[[str], str],
    register_demo: Callable[..., dict[str, Any]],
) -> None:
    name = fresh_name("inv-switch")
    register_demo(name, "1.0.0", index=0)
    register_demo(name, "1.1.0", index=1)
    old = _complete(gateway, name)
    assert old[0] == f"{name}@1.0.0"

    admin.post(f"/adapters/{name}/versions/1.1.0/promote").raise_for_status()
    new = _complete(gateway, name)
    assert new[0] == f"{name}@1.1.0"
    assert new[1] != old[1]

    admin.post(f"/adapters/{name}/rollback").raise_for_status()
    assert _complete(gateway, name) == old


@pytest.mark.vllm
def test_direct_bare_name_re_resolves_after_promotion(
    gateway: openai.OpenAI,
    direct: openai.OpenAI,
    admin: httpx.Client,
    vllm_server: VllmServer,
    fresh_name: Callable[[str], str],
    register_demo: Callable[..., dict[str, Any]],
) -> None:
    name = fresh_name("inv-direct")
    register_demo(name, "1.0.0", index=0)
    register_demo(name, "1.1.0", index=1)
    _, text_1_0 = _complete(gateway, f"{name}@1.0.0")
    _, text_1_1 = _complete(gateway, f"{name}@1.1.0")
    assert text_1_0 != text_1_1

    # straight to vLLM with the bare name: the resolver plugin finds the active version
    assert _complete(direct, name) == (name, text_1_0)
    assert name in _vllm_models(vllm_server)

    admin.post(f"/adapters/{name}/versions/1.1.0/promote").raise_for_status()
    assert name not in _vllm_models(vllm_server)  # the control plane made vLLM forget it
    assert _complete(direct, name) == (name, text_1_1)

    admin.post(f"/adapters/{name}/rollback").raise_for_status()
    assert _complete(direct, name) == (name, text_1_0)
