"""Warm-up against a real vLLM (CPU): in the background after a registration, on demand (JSON
and NDJSON), refusals that send nothing, and the plan's order."""

from __future__ import annotations

import json

import httpx
import pytest

from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.control_api import paths
from hi_moe_lora.tinymodel import TinyFleet
from registry.operations.warmup import WarmUpSettings
from tests.metrics.scrape import value
from tests.openai.live import register
from tests.operations.conftest import MAX_CPU_LORAS, demo_adapter
from tests.operations.live import eventually, metrics_text, vllm_models

pytestmark = pytest.mark.vllm


def _warmup(stack: EmbeddedStack, body: object = None, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{stack.control_plane_url}/admin/v1/warmup", json=body, headers=headers, timeout=120
    )


def test_a_new_version_is_loaded_in_the_background_before_any_request(
    ops_stack: EmbeddedStack, tiny_fleet: TinyFleet
) -> None:
    url = ops_stack.control_plane_url
    before = metrics_text(ops_stack)
    held = vllm_models(ops_stack)
    register(url, "warm-bg", "1.0.0", demo_adapter(tiny_fleet))
    report = eventually(
        lambda: httpx.get(f"{url}/admin/v1/warmup", timeout=30).json(),
        lambda r: r.get("reason") == "warm-bg changed",
    )
    assert report["reason"] == "warm-bg changed"
    assert report["targets"][0]["served_name"] == "warm-bg@1.0.0"  # the change first, then the plan
    # what vLLM already held is not sent again (it would only reload it)
    assert not {r["served_name"] for r in report["results"]} & held
    result = next(r for r in report["results"] if r["served_name"] == "warm-bg@1.0.0")
    assert result["outcome"] == "loaded", result
    assert result["load_ms"] is not None  # it was cold: cold minus warm was measured
    assert "warm-bg@1.0.0" in vllm_models(ops_stack)
    after = metrics_text(ops_stack)
    loaded = "hi_moe_lora_warmup_requests_total"
    assert value(after, loaded, outcome="loaded") > value(before, loaded, outcome="loaded")
    count = "hi_moe_lora_adapter_load_seconds_count"
    assert value(after, count, source="warmup") > value(before, count, source="warmup")
    # the first user request finds it loaded: a cache hit, and no warm-up counted as traffic
    body = {"model": "warm-bg", "prompt": "hello", "max_tokens": 2}
    assert httpx.post(f"{url}/v1/completions", json=body, timeout=60).status_code == 200
    text = metrics_text(ops_stack)
    cache = "hi_moe_lora_adapter_cache_requests_total"
    assert value(text, cache, specialist="warm-bg", result="hit") == 1
    assert value(text, cache, specialist="warm-bg", result="miss") == 0
    assert value(text, "hi_moe_lora_requests_total", specialist="warm-bg") == 1


def test_on_demand_json_and_ndjson(ops_stack: EmbeddedStack, tiny_fleet: TinyFleet) -> None:
    register(ops_stack.control_plane_url, "warm-od", "1.0.0", demo_adapter(tiny_fleet, "math"))
    answer = _warmup(ops_stack, {"adapters": ["warm-od@1.0.0"]})
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["reason"] == "on demand"
    assert [t["served_name"] for t in report["targets"]] == ["warm-od@1.0.0"]
    assert report["upstreams"] == [ops_stack.vllm_url]
    assert (report["loaded"], report["failed"]) == (1, 0)
    assert report["results"][0]["time_ms"] > 0

    streamed = _warmup(ops_stack, {"adapters": ["warm-od"]}, accept=paths.NDJSON)
    assert streamed.headers["content-type"].startswith(paths.NDJSON)
    events = [json.loads(line) for line in streamed.text.splitlines()]
    assert [e["event"] for e in events] == ["plan", "result", "done"]
    assert events[0]["total"] == 1
    assert events[1]["served_name"] == "warm-od@1.0.0"
    assert events[1]["outcome"] == "loaded"
    assert events[1]["load_ms"] is None  # already loaded: nothing to measure
    assert events[2]["loaded"] == 1


def test_bad_requests_are_refused_before_anything_is_sent(ops_stack: EmbeddedStack) -> None:
    before = metrics_text(ops_stack)
    unknown = _warmup(ops_stack, {"adapters": ["no-such-adapter"]})
    assert unknown.status_code == 404
    assert unknown.headers["content-type"] == "application/problem+json"
    assert unknown.json()["code"] == "adapter_not_found"
    assert _warmup(ops_stack, {"adapters": ["warm-od@9.9.9"]}).status_code == 404
    for body in ({"adapters": []}, {"adapterz": ["x"]}, {"adapters": "warm-od"}):
        refused = _warmup(ops_stack, body)
        assert refused.status_code == 422, body
        assert refused.headers["content-type"] == "application/problem+json"
    after = metrics_text(ops_stack)
    total = "hi_moe_lora_warmup_requests_total"
    assert value(after, total) == value(before, total)


def test_the_plan_holds_what_vllm_holds_in_host_memory_not_only_its_slots() -> None:
    assert WarmUpSettings(max_loras=16).plan_size == 16  # vLLM's default --max-cpu-loras
    assert WarmUpSettings(max_loras=16, max_cpu_loras=64).plan_size == 64


def test_the_default_plan_is_the_most_recently_used_versions(
    ops_stack: EmbeddedStack, tiny_fleet: TinyFleet
) -> None:
    url = ops_stack.control_plane_url
    for name in ("warm-plan-a", "warm-plan-b"):  # more served versions than vLLM holds
        register(url, name, "1.0.0", demo_adapter(tiny_fleet, "math"))
    body = {"model": "warm-od", "prompt": "hello", "max_tokens": 2}
    assert httpx.post(f"{url}/v1/completions", json=body, timeout=60).status_code == 200
    httpx.post(f"{url}/v1/feedback", json={"request_id": "flush", "success": True}, timeout=30)
    report = _warmup(ops_stack).json()  # no body: the plan
    names = [t["served_name"] for t in report["targets"]]
    assert len(names) == MAX_CPU_LORAS  # as many as vLLM holds in host memory, not MAX_LORAS
    assert names[0] == "warm-od@1.0.0"  # used last
    # sent last target first: the most recently used are loaded last and hold vLLM's slots
    assert [r["served_name"] for r in report["results"]] == names[::-1]
    assert all(r["outcome"] == "loaded" for r in report["results"]), report["results"]
