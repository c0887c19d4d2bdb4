"""Scrape-time metrics: the sliding traffic window and the write backlogs."""

from __future__ import annotations

import pytest

from registry.metrics.live import LiveCollector, TrafficWindow


def test_shares_over_the_window_and_expiry() -> None:
    window = TrafficWindow(window_s=30.0, bucket_s=10.0)
    for _ in range(3):
        window.add("python-lora", now=100.0)
    window.add("_base", now=115.0)
    assert window.shares(now=116.0) == {"python-lora": 0.75, "_base": 0.25}
    # the bucket of t=100 leaves the 30 s window at t=130
    assert window.shares(now=131.0) == {"_base": 1.0}
    assert window.shares(now=200.0) == {}


class _Backlog:
    def __init__(self, pending: int, dropped: int, lag: float) -> None:
        self.pending = pending
        self.dropped = dropped
        self._lag = lag

    def lag_s(self, now: float | None = None) -> float:
        return self._lag


def test_collector_reads_backlogs_and_shares_at_scrape() -> None:
    window = TrafficWindow()
    collector = LiveCollector(window)
    backlog = _Backlog(pending=3, dropped=1, lag=0.7)
    collector.watch("outcomes", backlog)
    window.add("math-lora")
    families = {f.name: f for f in collector.collect()}
    lag = families["hi_moe_lora_statistics_flush_lag_seconds"].samples[0]
    assert (lag.labels, lag.value) == ({"writer": "outcomes"}, 0.7)
    assert families["hi_moe_lora_statistics_pending"].samples[0].value == 3
    dropped = families["hi_moe_lora_statistics_dropped"].samples[0]
    assert (dropped.name, dropped.value) == ("hi_moe_lora_statistics_dropped_total", 1)
    share = families["hi_moe_lora_traffic_share_ratio"].samples[0]
    assert share.labels == {"specialist": "math-lora"}
    assert share.value == pytest.approx(1.0)
    backlog.pending = 0  # read again at the next scrape, not remembered
    families = {f.name: f for f in collector.collect()}
    assert families["hi_moe_lora_statistics_pending"].samples[0].value == 0
