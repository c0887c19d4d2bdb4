"""``/metrics`` of the control plane and of vLLM, scraped and parsed while real traffic flows:
the values move with requests (plain, streamed, ``model="auto"``), and nothing else moves them."""

from __future__ import annotations

import httpx
import pytest

from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.tinymodel import TinyFleet
from tests.metrics.scrape import samples, value
from tests.openai.live import register
from tests.operations.conftest import demo_adapter
from tests.operations.live import metrics_text

pytestmark = pytest.mark.vllm


def test_control_plane_metrics_move_with_traffic(
    ops_stack: EmbeddedStack, tiny_fleet: TinyFleet
) -> None:
    url = ops_stack.control_plane_url
    register(url, "scrape-a", "1.0.0", demo_adapter(tiny_fleet))
    before = metrics_text(ops_stack)
    plain = {"model": "scrape-a", "prompt": "hello", "max_tokens": 2}
    assert httpx.post(f"{url}/v1/completions", json=plain, timeout=60).status_code == 200
    with httpx.stream(
        "POST", f"{url}/v1/completions", json={**plain, "stream": True}, timeout=60
    ) as stream:
        assert stream.status_code == 200
        assert "[DONE]" in stream.read().decode()
    auto = {"model": "auto", "prompt": "write me a haiku about autumn", "max_tokens": 2}
    assert httpx.post(f"{url}/v1/completions", json=auto, timeout=60).status_code == 200
    unknown = {"model": "no-such-model", "prompt": "x", "max_tokens": 1}
    assert httpx.post(f"{url}/v1/completions", json=unknown, timeout=60).status_code == 404
    after = metrics_text(ops_stack)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    requests = "hi_moe_lora_requests_total"
    assert moved(requests, specialist="scrape-a", version="1.0.0", outcome="success") == 2
    assert moved(requests, specialist="_base", outcome="success") == 1  # auto fell back
    assert moved(requests, specialist="_none", outcome="client_error") == 1
    assert moved("hi_moe_lora_request_duration_seconds_count") == 4
    assert moved("hi_moe_lora_time_to_first_token_seconds_count", specialist="scrape-a") == 1
    assert value(after, "hi_moe_lora_requests_in_flight") == 0
    assert moved("hi_moe_lora_dispatch_decisions_total", tier="fallback") == 1
    assert moved("hi_moe_lora_dispatch_duration_seconds_count") == 1
    assert moved("hi_moe_lora_routing_gaps_total") == 1
    fallbacks = "hi_moe_lora_dispatch_fallbacks_total"
    assert (
        sum(
            v - value(before, n, **dict(ls))
            for (n, ls), v in samples(after).items()
            if n == fallbacks
        )
        == 1
    )
    cache = "hi_moe_lora_adapter_cache_requests_total"
    assert moved(cache, specialist="scrape-a") == 2
    shares = {
        dict(ls)["specialist"]
        for (n, ls), _ in samples(after).items()
        if n == "hi_moe_lora_traffic_share_ratio"
    }
    assert {"scrape-a", "_base"} <= shares
    writers = {
        dict(ls)["writer"]
        for (n, ls), _ in samples(after).items()
        if n == "hi_moe_lora_statistics_flush_lag_seconds"
    }
    assert writers == {"outcomes", "routing_gaps"}
    assert value(after, "hi_moe_lora_upstream_up", upstream=ops_stack.vllm_url) == 1
    # scraping is not traffic
    again = metrics_text(ops_stack)
    assert value(again, requests) == value(after, requests)


def test_vllms_own_metrics_carry_the_resolver_and_worker_load_times(
    ops_stack: EmbeddedStack, tiny_fleet: TinyFleet
) -> None:
    register(ops_stack.control_plane_url, "scrape-b", "1.0.0", demo_adapter(tiny_fleet, "math"))
    body = {"model": "scrape-b@1.0.0", "prompt": "hello", "max_tokens": 1}
    answer = httpx.post(
        f"{ops_stack.vllm_url}/v1/completions",
        json=body,
        headers=ops_stack.vllm_headers,
        timeout=60,
    )
    assert answer.status_code == 200
    text = httpx.get(f"{ops_stack.vllm_url}/metrics", timeout=30).text
    resolved = "hi_moe_lora_resolver_duration_seconds_count"
    assert value(text, resolved, outcome="resolved") >= 1
    assert value(text, "hi_moe_lora_vllm_adapter_load_seconds_count", outcome="loaded") >= 1
