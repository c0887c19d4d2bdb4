"""Worker metrics: several workers' expositions merged into one, over real Unix sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from registry.metrics import workers
from registry.metrics.families import ControlPlaneMetrics
from registry.metrics.workers import WorkerMetrics, merge, render


def _samples(text: bytes | str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    raw = text.decode() if isinstance(text, bytes) else text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(raw)
        for s in family.samples
    }


def test_counters_add_up_and_conditions_take_the_worst_view() -> None:
    a = ControlPlaneMetrics()
    b = ControlPlaneMetrics()
    for metrics, count in ((a, 3), (b, 4)):
        for _ in range(count):
            metrics.client_request("team")
    a.upstream_up.labels("http://vllm:8000").set(1)
    b.upstream_up.labels("http://vllm:8000").set(0)  # b's last check failed
    a.in_flight.inc(2)
    b.in_flight.inc(5)
    a.change_feed_connected.set(1)
    b.change_feed_connected.set(1)
    merged = _samples(render(merge([a.exposition()[0].decode(), b.exposition()[0].decode()])))
    assert merged[("hi_moe_lora_client_requests_total", (("client", "team"),))] == 7
    assert merged[("hi_moe_lora_requests_in_flight", ())] == 7
    assert merged[("hi_moe_lora_upstream_up", (("upstream", "http://vllm:8000"),))] == 0
    assert merged[("hi_moe_lora_change_feed_connected", ())] == 1
    created = ("hi_moe_lora_client_requests_created", (("client", "team"),))
    assert merged[created] == min(
        _samples(a.exposition()[0])[created], _samples(b.exposition()[0])[created]
    )


def test_histograms_add_bucket_by_bucket() -> None:
    a = ControlPlaneMetrics()
    b = ControlPlaneMetrics()
    a.first_token("python-lora", 0.01)
    b.first_token("python-lora", 0.01)
    b.first_token("python-lora", 30.0)
    merged = _samples(render(merge([a.exposition()[0].decode(), b.exposition()[0].decode()])))
    counts = {k: v for k, v in merged.items() if k[0].endswith("time_to_first_token_seconds_count")}
    assert list(counts.values()) == [3]
    inf = [
        v
        for k, v in merged.items()
        if k[0].endswith("_bucket") and ("le", "+Inf") in k[1] and "first_token" in k[0]
    ]
    assert inf == [3]


def test_traffic_shares_are_recomputed_from_the_summed_window() -> None:
    a = ControlPlaneMetrics()
    b = ControlPlaneMetrics()
    # a served 3 python-lora requests; b served 1 python-lora and 4 base-model requests
    for metrics, served in ((a, ["python-lora"] * 3), (b, ["python-lora"] + ["_base"] * 4)):
        for specialist in served:
            metrics.request_finished(specialist, "1.0.0", 200, 0.01)
    merged = _samples(render(merge([a.exposition()[0].decode(), b.exposition()[0].decode()])))
    share = {k[1][0][1]: v for k, v in merged.items() if k[0] == "hi_moe_lora_traffic_share_ratio"}
    assert share == {"python-lora": 0.5, "_base": 0.5}  # not 1.0 + 0.2 summed, nor averaged
    window = {
        k[1][0][1]: v for k, v in merged.items() if k[0] == "hi_moe_lora_traffic_window_requests"
    }
    assert window == {"python-lora": 4, "_base": 4}


async def test_each_worker_answers_for_all_over_unix_sockets(tmp_path: Path) -> None:
    directory = tmp_path / "workers"
    a_metrics, b_metrics = ControlPlaneMetrics(), ControlPlaneMetrics()
    a = WorkerMetrics(directory, lambda: a_metrics.exposition()[0])
    b = WorkerMetrics(directory, lambda: b_metrics.exposition()[0])
    b.socket_path = directory / "other.sock"  # one process here: give b its own socket
    await a.start()
    await b.start()
    try:
        a_metrics.client_request("team")
        b_metrics.client_request("team")
        b_metrics.client_request("team")
        key = ("hi_moe_lora_client_requests_total", (("client", "team"),))
        assert _samples(await a.exposition())[key] == 3
        assert _samples(await b.exposition())[key] == 3
        (directory / "gone.sock").touch()  # a worker that died without cleaning up
        assert _samples(await a.exposition())[key] == 3
    finally:
        await b.stop()
    assert not (directory / "other.sock").exists()
    # alone again: its own exposition, unchanged
    key = ("hi_moe_lora_client_requests_total", (("client", "team"),))
    assert _samples(await a.exposition())[key] == 1
    await a.stop()


async def test_a_sibling_that_never_answers_is_skipped_in_bounded_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "w"
    mine = ControlPlaneMetrics()
    me = WorkerMetrics(directory, lambda: mine.exposition()[0])
    await me.start()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    stuck = await asyncio.start_unix_server(silent, path=str(directory / "stuck.sock"))
    monkeypatch.setattr(workers, "SIBLING_TIMEOUT_S", 0.3)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        text = await me.exposition()
        assert loop.time() - started < 2
        assert b"hi_moe_lora_requests_in_flight" in text
    finally:
        stuck.close()
        await me.stop()
