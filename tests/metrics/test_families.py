"""The control plane's families: names, labels and values as a scrape shows them."""

from __future__ import annotations

from registry.metrics.families import SPECIALIST_BASE, SPECIALIST_NONE, ControlPlaneMetrics
from tests.metrics.scrape import samples, value


def scrape(metrics: ControlPlaneMetrics) -> str:
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    return body.decode()


def test_request_families_move_with_requests() -> None:
    metrics = ControlPlaneMetrics()
    metrics.in_flight.inc()
    metrics.request_finished("python-lora", "1.0.0", 200, 0.2)
    metrics.in_flight.dec()
    metrics.request_finished("python-lora", "1.0.0", 503, 0.01)
    metrics.request_finished(SPECIALIST_NONE, "", 404, 0.001)
    metrics.first_token("python-lora", 0.05)
    text = scrape(metrics)
    assert value(text, "hi_moe_lora_requests_total", specialist="python-lora") == 2
    assert value(text, "hi_moe_lora_requests_total", outcome="unavailable") == 1
    assert value(text, "hi_moe_lora_requests_total", specialist=SPECIALIST_NONE) == 1
    # every outcome of a seen specialist exists (at 0), so rate() catches its first error
    assert (
        "hi_moe_lora_requests_total",
        frozenset(
            {("specialist", "python-lora"), ("version", "1.0.0"), ("outcome", "server_error")}
        ),
    ) in samples(text)
    assert value(text, "hi_moe_lora_request_duration_seconds_count") == 3
    assert value(text, "hi_moe_lora_time_to_first_token_seconds_count") == 1
    assert value(text, "hi_moe_lora_requests_in_flight") == 0
    # requests that named nothing routable are not traffic of anyone
    share = {
        dict(labels)["specialist"]: v
        for (name, labels), v in samples(text).items()
        if name == "hi_moe_lora_traffic_share_ratio"
    }
    assert share == {"python-lora": 1.0}


def test_cache_load_dispatch_and_operations_families() -> None:
    metrics = ControlPlaneMetrics()
    metrics.adapter_cache("math-lora", hit=False)
    metrics.adapter_cache("math-lora", hit=True)
    metrics.adapter_loaded("warmup", 0.3)
    metrics.adapter_loaded("request", -0.1)  # a negative estimate counts as 0
    metrics.dispatched("keyword", "math-lora", None, 0.001)
    metrics.dispatched("fallback", None, "no_signal", 0.002)
    metrics.routing_gaps.inc()
    metrics.warmed("loaded")
    metrics.foreign_binding_unloaded("unloaded")
    metrics.foreign_binding_unloaded("failed")
    metrics.upstream_checked("http://vllm:8000", True)
    metrics.adapter_probed("math-lora", "1.0.0", "http://vllm:8000", False)
    text = scrape(metrics)
    assert value(text, "hi_moe_lora_adapter_cache_requests_total", result="miss") == 1
    assert value(text, "hi_moe_lora_adapter_cache_requests_total", result="hit") == 1
    assert value(text, "hi_moe_lora_adapter_load_seconds_count") == 2
    assert value(text, "hi_moe_lora_adapter_load_seconds_sum") == 0.3
    assert value(text, "hi_moe_lora_dispatch_decisions_total", specialist=SPECIALIST_BASE) == 1
    assert value(text, "hi_moe_lora_dispatch_fallbacks_total", reason="no_signal") == 1
    assert value(text, "hi_moe_lora_routing_gaps_total") == 1
    assert value(text, "hi_moe_lora_warmup_requests_total", outcome="loaded") == 1
    assert value(text, "hi_moe_lora_foreign_bindings_total", outcome="unloaded") == 1
    assert value(text, "hi_moe_lora_foreign_bindings_total", outcome="failed") == 1
    assert value(text, "hi_moe_lora_upstream_up", upstream="http://vllm:8000") == 1
    assert value(text, "hi_moe_lora_adapter_healthy", specialist="math-lora") == 0
    metrics.adapter_retired("math-lora", "1.0.0", "http://vllm:8000")
    metrics.adapter_retired("math-lora", "1.0.0", "http://vllm:8000")  # twice is harmless
    assert "hi_moe_lora_adapter_healthy{" not in scrape(metrics)


def test_every_family_is_prefixed_and_apps_do_not_share_a_registry() -> None:
    first, second = ControlPlaneMetrics(), ControlPlaneMetrics()
    first.request_finished("a", "1.0.0", 200, 0.1)
    assert value(scrape(second), "hi_moe_lora_requests_total") == 0
    names = {name for name, _ in samples(scrape(first))}
    assert names
    assert all(name.startswith("hi_moe_lora_") for name in names)
