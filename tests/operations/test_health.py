"""The health monitor against a real vLLM (CPU): healthy, no-effect and broken adapters, and a
vLLM that is stopped and started again."""

from __future__ import annotations

import logging
import shutil
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
from hi_moe_lora.app.processes import free_port
from hi_moe_lora.tinymodel import TinyFleet
from registry.settings import ControlPlaneSettings
from tests.metrics.scrape import value
from tests.openai.live import ServedApp, control_plane_settings, register, serve_control_plane
from tests.operations.conftest import HEALTH_INTERVAL_S, demo_adapter, zeroed_copy
from tests.operations.live import adapter_health, eventually, health, metrics_text, vllm_models
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter
from tests.support.log_records import records_of


@pytest.mark.vllm
def test_an_adapter_with_no_effect_is_unhealthy_and_a_real_one_healthy(
    ops_stack: EmbeddedStack, tiny_fleet: TinyFleet
) -> None:
    url = ops_stack.control_plane_url
    source = demo_adapter(tiny_fleet)
    register(url, "probe-good", "1.0.0", source)
    # registration reads only below the stack's source roots (its work directory is one)
    zero_source = zeroed_copy(source, ops_stack.workdir / "sources" / "zero")
    register(url, "probe-zero", "1.0.0", zero_source)
    good = eventually(
        lambda: adapter_health(ops_stack, "probe-good@1.0.0"), lambda h: h is not None
    )
    zero = eventually(
        lambda: adapter_health(ops_stack, "probe-zero@1.0.0"), lambda h: h is not None
    )
    assert good is not None
    assert good["healthy"], good
    assert good["latency_ms"] > 0
    assert zero is not None
    assert not zero["healthy"]
    assert "answers exactly as the base model does" in zero["reason"]
    assert health(ops_stack)["status"] == "degraded"
    text = metrics_text(ops_stack)
    assert value(text, "hi_moe_lora_adapter_healthy", specialist="probe-good") == 1
    assert value(text, "hi_moe_lora_adapter_healthy", specialist="probe-zero") == 0
    assert value(text, "hi_moe_lora_upstream_up", upstream=ops_stack.vllm_url) == 1
    # probes are not user traffic: no statistics moved
    info = httpx.get(f"{url}/admin/v1/adapters/probe-good", timeout=30).json()
    assert info["versions"][0]["request_count"] == 0


@pytest.mark.vllm
def test_weights_replaced_or_removed_on_disk_are_reported_within_an_interval(
    ops_stack: EmbeddedStack, tiny_fleet: TinyFleet, tmp_path: Path
) -> None:
    url = ops_stack.control_plane_url
    info = register(url, "probe-broken", "1.0.0", demo_adapter(tiny_fleet, "math-lora"))
    served = "probe-broken@1.0.0"
    first = eventually(
        lambda: adapter_health(ops_stack, served), lambda h: h is not None and h["healthy"]
    )
    assert first is not None
    assert first["healthy"], first
    stored = Path(info["local_path"])
    zeroed = zeroed_copy(stored, tmp_path / "zeroed")
    shutil.copyfile(zeroed / "adapter_model.safetensors", stored / "adapter_model.safetensors")
    changed_at = time.monotonic()
    broken = eventually(
        lambda: adapter_health(ops_stack, served), lambda h: h is not None and not h["healthy"]
    )
    assert broken is not None
    assert not broken["healthy"]
    assert "changed on disk" in broken["reason"]
    assert time.monotonic() - changed_at < 3 * HEALTH_INTERVAL_S + 10  # one round, plus probes
    shutil.rmtree(stored)
    gone = eventually(
        lambda: adapter_health(ops_stack, served),
        lambda h: h is not None and "missing" in (h["reason"] or ""),
    )
    assert gone is not None
    assert "its artifact is missing" in gone["reason"]
    # vLLM's engine dies reloading a version whose files are gone: the front door refuses it
    body = {"model": served, "prompt": "hello", "max_tokens": 2}
    refused = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    assert refused.status_code == 503
    assert "its artifact is missing" in refused.json()["error"]["message"]
    assert _complete(ops_stack).status_code == 200  # vLLM is still serving


def _complete(stack: EmbeddedStack, model: str | None = None) -> httpx.Response:
    body = {"model": model or str(stack.model_dir), "prompt": "hello", "max_tokens": 2}
    return httpx.post(f"{stack.control_plane_url}/v1/completions", json=body, timeout=60)


def _ready(stack: EmbeddedStack) -> httpx.Response:
    return httpx.get(f"{stack.control_plane_url}/readyz", timeout=30)


@pytest.mark.vllm
def test_a_stopped_vllm_fails_fast_turns_unready_and_both_recover_on_restart(
    ops_stack: EmbeddedStack, tiny_fleet: TinyFleet
) -> None:
    url = ops_stack.control_plane_url
    register(url, "restart-warm", "1.0.0", demo_adapter(tiny_fleet))
    assert _ready(ops_stack).status_code == 200
    assert _complete(ops_stack).status_code == 200
    assert _complete(ops_stack, "restart-warm").status_code == 200  # the most recently used

    ops_stack.stop_vllm()
    started = time.monotonic()
    failed = _complete(ops_stack)
    assert failed.status_code == 503
    assert failed.json()["error"]["type"] == "server_error"
    assert time.monotonic() - started < 5
    unready = eventually(lambda: _ready(ops_stack), lambda r: r.status_code == 503, 10)
    assert unready.status_code == 503
    assert unready.json()["code"] == "no_healthy_upstream"
    assert time.monotonic() - started < 2 * HEALTH_INTERVAL_S + 5
    picture = health(ops_stack)
    assert picture["status"] == "down"
    assert picture["upstreams"][0]["up"] is False
    assert picture["upstreams"][0]["reason"]
    assert value(metrics_text(ops_stack), "hi_moe_lora_upstream_up") == 0
    started = time.monotonic()
    fast = _complete(ops_stack)  # the monitor knows: no connection attempt at all
    assert fast.status_code == 503
    assert "no healthy vLLM replica" in fast.json()["error"]["message"]
    assert time.monotonic() - started < 1

    ops_stack.start_vllm()  # same port; the control plane keeps running
    ready = eventually(lambda: _ready(ops_stack), lambda r: r.status_code == 200, 30)
    assert ready.status_code == 200
    assert _complete(ops_stack).status_code == 200
    # the restarted vLLM had nothing loaded: warm-up loaded the plan before any user request
    report = eventually(
        lambda: httpx.get(f"{url}/admin/v1/warmup", timeout=30).json(),
        lambda r: "came up" in r.get("reason", ""),
    )
    assert "came up" in report["reason"], report
    loaded = [r["served_name"] for r in report["results"] if r["outcome"] == "loaded"]
    assert "restart-warm@1.0.0" in loaded
    assert "restart-warm@1.0.0" in vllm_models(ops_stack)


class _EchoVllm:
    """A stand-in for vLLM's HTTP surface that answers each model with its own name: enough to
    watch *when* the monitor probes (the real vLLM tests above show *what* it finds)."""

    def __init__(self) -> None:
        self.app = Starlette(
            routes=[
                Route("/health", self.health),
                Route("/v1/models", self.models),
                Route("/v1/completions", self.completions, methods=["POST"]),
            ]
        )

    async def health(self, request: Request) -> Response:
        return JSONResponse({})

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": DEFAULT_BASE_MODEL}]})

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        return JSONResponse({"choices": [{"index": 0, "text": f"from {body['model']}"}]})


def test_a_fleet_change_is_probed_at_once_not_an_interval_later(tmp_path: Path) -> None:
    upstream = ServedApp(_EchoVllm().app).start()
    settings = _monitoring(tmp_path, upstream.url, health_interval_s=3600.0)
    plane = serve_control_plane(settings)
    try:
        url = plane.url
        eventually(lambda: _ready_at(url), lambda status: status == 200, 10)
        register(url, "soon", "1.0.0", write_adapter(tmp_path / "src"))
        picture = eventually(
            lambda: httpx.get(f"{url}/v1/health", timeout=10).json(),
            lambda p: any(a["served_name"] == "soon@1.0.0" for a in p["upstreams"][0]["adapters"]),
            10,
        )
        (soon,) = picture["upstreams"][0]["adapters"]
        assert soon["healthy"], soon
    finally:
        plane.stop()
        upstream.stop()


def _monitoring(tmp_path: Path, upstream_url: str, **overrides: Any) -> ControlPlaneSettings:
    """Settings of a control plane whose health monitor watches ``upstream_url``."""
    return control_plane_settings(
        tmp_path / "plane", DEFAULT_BASE_MODEL, [upstream_url], health_checks=True, **overrides
    )


def _ready_at(url: str) -> int:
    return httpx.get(f"{url}/readyz", timeout=10).status_code


def _messages(records: list[logging.LogRecord], level: int) -> list[str]:
    return [r.getMessage() for r in records if r.levelno == level]


def test_an_upstream_not_up_yet_is_logged_as_starting_then_warned_about_once(
    tmp_path: Path,
) -> None:
    """vLLM may come up after the control plane: no warning at every start, one once it is late."""
    closed = f"http://127.0.0.1:{free_port()}"
    settings = _monitoring(tmp_path, closed, health_start_grace_s=0.5)
    with records_of("registry.operations.health", logging.INFO) as records:
        plane = serve_control_plane(settings)
        try:
            warned = eventually(
                lambda: _messages(records, logging.WARNING), lambda w: bool(w), timeout_s=15
            )
            time.sleep(2.5)  # another recheck (every 2 s while down): no second warning
        finally:
            plane.stop()
    starting = [m for m in _messages(records, logging.INFO) if "not up yet" in m]
    assert len(starting) == 1, starting
    assert closed in starting[0]
    assert len(warned) == 1, warned
    assert _messages(records, logging.WARNING) == warned
    assert "still not up" in warned[0]
    assert closed in warned[0]


def test_an_upstream_that_goes_down_is_warned_about_once(tmp_path: Path) -> None:
    upstream = ServedApp(_EchoVllm().app).start()
    # already up once: the start grace no longer applies
    settings = _monitoring(tmp_path, upstream.url, health_interval_s=1.0, health_start_grace_s=0.5)
    with records_of("registry.operations.health", logging.INFO) as records:
        plane = serve_control_plane(settings)
        try:
            assert eventually(lambda: _ready_at(plane.url), lambda s: s == 200, 10) == 200
            upstream.stop()
            warned = eventually(
                lambda: _messages(records, logging.WARNING), lambda w: bool(w), timeout_s=15
            )
            time.sleep(2.5)  # rechecked while down: nothing more
        finally:
            plane.stop()
            upstream.stop()
    assert len(warned) == 1, warned
    assert "is down" in warned[0]
    assert _messages(records, logging.WARNING) == warned
    assert not [m for m in _messages(records, logging.INFO) if "not up yet" in m]
