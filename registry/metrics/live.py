"""Metrics read at scrape time: write backlogs and the recent traffic share per specialist.

:class:`TrafficWindow` counts answered requests per specialist in 10-second buckets over the last
:data:`TRAFFIC_WINDOW_S` seconds (in memory, O(1) per request). :class:`LiveCollector` is a
Prometheus collector that, on each scrape, reads the window and the :class:`BatchWriter`\\ s that
write statistics and routing gaps off the request path (their lag, backlog and drops).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from registry.metrics.labels import PREFIX

#: How far back the traffic share looks.
TRAFFIC_WINDOW_S = 300.0
BUCKET_S = 10.0


class Backlog(Protocol):
    """What the collector reads of a :class:`registry.background.BatchWriter`."""

    @property
    def pending(self) -> int: ...

    @property
    def dropped(self) -> int: ...

    def lag_s(self, now: float | None = None) -> float: ...


class TrafficWindow:
    """Requests per specialist over the last ``window_s`` seconds, in ``bucket_s`` buckets."""

    def __init__(self, window_s: float = TRAFFIC_WINDOW_S, bucket_s: float = BUCKET_S) -> None:
        self._window_s = window_s
        self._bucket_s = bucket_s
        self._buckets: deque[tuple[int, Counter[str]]] = deque()

    def add(self, specialist: str, now: float | None = None) -> None:
        index = int((time.monotonic() if now is None else now) // self._bucket_s)
        if not self._buckets or self._buckets[-1][0] != index:
            self._buckets.append((index, Counter()))
            self._expire(index)
        self._buckets[-1][1][specialist] += 1

    def counts(self, now: float | None = None) -> dict[str, int]:
        """Each specialist's requests in the window."""
        index = int((time.monotonic() if now is None else now) // self._bucket_s)
        self._expire(index)
        total: Counter[str] = Counter()
        for _, counts in self._buckets:
            total.update(counts)
        return dict(total)

    def shares(self, now: float | None = None) -> dict[str, float]:
        """Each specialist's share of the window's requests (empty when there were none)."""
        total = self.counts(now)
        requests = sum(total.values())
        return {name: count / requests for name, count in total.items()} if requests else {}

    def _expire(self, index: int) -> None:
        oldest = index - int(self._window_s // self._bucket_s) + 1
        while self._buckets and self._buckets[0][0] < oldest:
            self._buckets.popleft()


class LiveCollector(Collector):
    """Reads backlogs and the traffic window when Prometheus scrapes."""

    def __init__(self, traffic: TrafficWindow) -> None:
        self._traffic = traffic
        self._writers: dict[str, Backlog] = {}

    def watch(self, writer: str, backlog: Backlog) -> None:
        """Export ``backlog`` under ``writer`` (a fixed name: ``outcomes``, ``routing_gaps``)."""
        self._writers[writer] = backlog

    def describe(self) -> Iterator[Any]:
        return iter(())  # families are only known at collection time

    def collect(self) -> Iterator[Any]:
        lag = GaugeMetricFamily(
            PREFIX + "statistics_flush_lag_seconds",
            "Age of the oldest record not yet written to the database (0 when none is pending).",
            labels=["writer"],
        )
        pending = GaugeMetricFamily(
            PREFIX + "statistics_pending",
            "Records waiting to be written to the database.",
            labels=["writer"],
        )
        dropped = CounterMetricFamily(
            PREFIX + "statistics_dropped",
            "Records dropped because the write backlog was full.",
            labels=["writer"],
        )
        now = time.monotonic()
        for name, backlog in sorted(self._writers.items()):
            lag.add_metric([name], backlog.lag_s(now))
            pending.add_metric([name], backlog.pending)
            dropped.add_metric([name], backlog.dropped)
        share = GaugeMetricFamily(
            PREFIX + "traffic_share_ratio",
            f"Share of the completion requests of the last {TRAFFIC_WINDOW_S:.0f} s served by "
            "each specialist (_base: the base model).",
            labels=["specialist"],
        )
        window = GaugeMetricFamily(
            PREFIX + "traffic_window_requests",
            f"Completion requests of the last {TRAFFIC_WINDOW_S:.0f} s per specialist (_base: the "
            "base model): what traffic_share_ratio divides.",
            labels=["specialist"],
        )
        counts = self._traffic.counts(now)
        requests = sum(counts.values())
        for specialist, count in sorted(counts.items()):
            window.add_metric([specialist], count)
            share.add_metric([specialist], count / requests)
        yield from (lag, pending, dropped, share, window)
