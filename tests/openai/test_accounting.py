"""Per-request accounting: in flight, outcome, cache hits and the cold-start estimate."""

from __future__ import annotations

import time

from registry.fleet.loaded import LoadedAdapters
from registry.metrics.families import ControlPlaneMetrics
from registry.openai.accounting import CLIENT_CLOSED, RequestAccount, WarmFirstTokens
from registry.openai.targets import Target
from tests.metrics.scrape import value

REPLICA = "http://vllm:8000"
ADAPTER = Target("python-lora", "python-lora@1.0.0", "python-lora", "1.0.0")


def scrape(metrics: ControlPlaneMetrics) -> str:
    return metrics.exposition()[0].decode()


def test_a_miss_then_a_hit_and_the_version_is_remembered_as_loaded() -> None:
    metrics, loaded, warm = ControlPlaneMetrics(), LoadedAdapters(), WarmFirstTokens()
    first = RequestAccount(metrics, loaded, warm)
    assert value(scrape(metrics), "hi_moe_lora_requests_in_flight") == 1
    first.routed(ADAPTER)
    first.sent(REPLICA)
    first.finished(200)
    first.finished(500)  # a second ending is ignored
    assert loaded.knows(REPLICA, "python-lora@1.0.0")
    second = RequestAccount(metrics, loaded, warm)
    second.routed(ADAPTER)
    second.sent(REPLICA)
    second.finished(200)
    text = scrape(metrics)
    assert value(text, "hi_moe_lora_adapter_cache_requests_total", result="miss") == 1
    assert value(text, "hi_moe_lora_adapter_cache_requests_total", result="hit") == 1
    assert value(text, "hi_moe_lora_requests_total", specialist="python-lora") == 2
    assert value(text, "hi_moe_lora_requests_in_flight") == 0


def test_failed_requests_do_not_mark_a_version_loaded() -> None:
    metrics, loaded = ControlPlaneMetrics(), LoadedAdapters()
    account = RequestAccount(metrics, loaded, WarmFirstTokens())
    account.routed(ADAPTER)
    account.sent(REPLICA)
    account.finished(404)
    assert not loaded.knows(REPLICA, "python-lora@1.0.0")


def test_unrouted_and_base_requests_are_labelled_apart() -> None:
    metrics, loaded = ControlPlaneMetrics(), LoadedAdapters()
    RequestAccount(metrics, loaded, WarmFirstTokens()).finished(400)
    base = RequestAccount(metrics, loaded, WarmFirstTokens())
    base.routed(Target("m", "m"))
    base.sent(REPLICA)
    base.finished(CLIENT_CLOSED)
    text = scrape(metrics)
    assert value(text, "hi_moe_lora_requests_total", specialist="_none") == 1
    assert (
        value(text, "hi_moe_lora_requests_total", specialist="_base", outcome="client_error") == 1
    )
    assert value(text, "hi_moe_lora_adapter_cache_requests_total") == 0  # base: no adapter


def test_a_streamed_miss_estimates_the_load_from_warm_first_tokens() -> None:
    metrics, loaded, warm = ControlPlaneMetrics(), LoadedAdapters(), WarmFirstTokens()
    loaded.mark(REPLICA, "python-lora@1.0.0")
    hit = RequestAccount(metrics, loaded, warm)
    hit.routed(ADAPTER)
    hit.sent(REPLICA)
    hit.first_chunk()
    hit.finished(200)
    typical = warm.typical(REPLICA)
    assert typical is not None
    other = Target("math-lora", "math-lora@1.0.0", "math-lora", "1.0.0")
    miss = RequestAccount(metrics, loaded, warm)
    miss.routed(other)
    miss.sent(REPLICA)
    time.sleep(0.05)
    miss.first_chunk()
    miss.finished(200)
    text = scrape(metrics)
    assert value(text, "hi_moe_lora_adapter_load_seconds_count", source="request") == 1
    assert value(text, "hi_moe_lora_adapter_load_seconds_sum", source="request") >= 0.04
    assert value(text, "hi_moe_lora_time_to_first_token_seconds_count") == 2
