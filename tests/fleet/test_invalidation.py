"""After promote/rollback the control plane makes every vLLM replica forget the bare name."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
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
from registry.metrics.families import ControlPlaneMetrics
from tests.conftest import VllmServer
from tests.openai.live import ServedApp, control_plane_settings, register, serve_control_plane
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter
from tests.support.sockets import silent_listener

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
    pool = UpstreamPool([s.url for _, s in replicas] + [closed], read_timeout_s=5)
    metrics = ControlPlaneMetrics()
    caplog.set_level(logging.DEBUG, logger="registry.fleet.invalidation")
    invalidator = BareNameInvalidator(pool, metrics)
    await invalidator("python-lora")
    await invalidator.drain()
    await pool.aclose()
    assert [recorder.names for recorder, _ in replicas] == [["python-lora"]] * 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # the 404 ("was not loaded") is expected; the 500 and the closed port are not
    assert len(warnings) == 2
    assert any("HTTP 500" in w for w in warnings)
    assert any(closed in w for w in warnings)
    assert _unloads(metrics) == {"unloaded": 1, "not_loaded": 1, "failed": 2}


def _unloads(metrics: ControlPlaneMetrics) -> dict[str, int]:
    counts: dict[str, int] = {}
    for family in metrics.registry.collect():
        if family.name == "hi_moe_lora_bare_name_unloads":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counts[sample.labels["outcome"]] = int(sample.value)
    return counts


async def test_a_hung_replica_neither_holds_the_caller_nor_the_others(
    replicas: list[tuple[UnloadRecorder, ServedApp]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="registry.fleet.invalidation")
    metrics = ControlPlaneMetrics()
    with silent_listener() as hung:
        pool = UpstreamPool([replicas[0][1].url, hung], read_timeout_s=600)
        invalidator = BareNameInvalidator(pool, metrics, deadline_s=1.0, wait_s=0.2)
        started = time.monotonic()
        await invalidator("python-lora")
        assert time.monotonic() - started < 0.5  # waited wait_s, not the deadline
        assert invalidator.pending == 1
        await invalidator.drain()
        elapsed = time.monotonic() - started
        await pool.aclose()
    assert 0.9 < elapsed < 3.0  # the hung replica's unload ended at its deadline
    assert replicas[0][0].names == ["python-lora"]
    failed = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(failed) == 1
    assert hung in failed[0]
    assert "no answer within 1 s" in failed[0]
    assert _unloads(metrics) == {"unloaded": 1, "failed": 1}


async def test_stop_cancels_unloads_still_running() -> None:
    with silent_listener() as hung:
        pool = UpstreamPool([hung], read_timeout_s=600)
        invalidator = BareNameInvalidator(pool, deadline_s=60, wait_s=0.05)
        await invalidator("python-lora")
        assert invalidator.pending == 1
        started = time.monotonic()
        await invalidator.stop()
        assert time.monotonic() - started < 1
        assert invalidator.pending == 0
        await pool.aclose()


def test_promote_and_rollback_answer_at_once_when_vllm_hangs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM accepts connections but never answers (as under SIGSTOP): the admin calls answer
    the committed state at once, routing follows, and the unloads fail later, logged."""
    caplog.set_level(logging.INFO, logger="registry.fleet.invalidation")
    with silent_listener() as hung:
        settings = control_plane_settings(
            tmp_path, DEFAULT_BASE_MODEL, [hung], upstream_unload_timeout_s=1.0
        )
        plane = serve_control_plane(settings)
        try:
            register(plane.url, "spec", "1.0.0", write_adapter(tmp_path / "a"))
            register(plane.url, "spec", "1.1.0", write_adapter(tmp_path / "b", seed=1))
            with httpx.Client(base_url=f"{plane.url}/admin/v1", timeout=30) as admin:
                for call, expected in (
                    ("/adapters/spec/versions/1.1.0/promote", "1.1.0"),
                    ("/adapters/spec/rollback", "1.0.0"),
                ):
                    started = time.monotonic()
                    answer = admin.post(call)
                    assert time.monotonic() - started < 1.5
                    assert answer.status_code == 200
                    assert (answer.json()["version"], answer.json()["is_active"]) == (
                        expected,
                        True,
                    )
                    shown = admin.get("/adapters/spec").json()
                    assert shown["active_version"] == expected
                deadline = time.monotonic() + 10
                while len(_failed_unloads(caplog)) < 2 and time.monotonic() < deadline:
                    time.sleep(0.1)
        finally:
            plane.stop()
    failed = _failed_unloads(caplog)
    assert len(failed) == 2
    assert all("no answer within 1 s" in message for message in failed)


def _failed_unloads(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "registry.fleet.invalidation" and r.levelno == logging.WARNING
    ]


# ------------------------------------------------------------------ real vLLM


def _complete(client: openai.OpenAI, model: str) -> tuple[str, str]:
    raw = client.completions.with_raw_response.create(
        model=model, prompt=PROMPT, max_tokens=8, temperature=0.0
    )
    completion = raw.parse()
    served = raw.headers.get("x-himoe-served-model", completion.model)
    return served, completion.choices[0].text


def _vllm_models(vllm_server: VllmServer) -> set[str]:
    headers = vllm_server.stack.vllm_headers
    data = httpx.get(f"{vllm_server.url}/v1/models", headers=headers, timeout=30).json()["data"]
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
    # the control plane made vLLM forget it (before answering, unless vLLM is slow to answer)
    deadline = time.monotonic() + 10
    while name in _vllm_models(vllm_server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert name not in _vllm_models(vllm_server)
    assert _complete(direct, name) == (name, text_1_1)

    admin.post(f"/adapters/{name}/rollback").raise_for_status()
    assert _complete(direct, name) == (name, text_1_0)
