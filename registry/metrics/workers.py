"""One ``/metrics`` for a control plane run as several worker processes (``serve --workers N``).

Each worker keeps its own metric families in its own memory, and the kernel hands a scrape to
whichever worker accepts it, so one worker's numbers alone would jump between scrapes. Instead:

- every worker serves its own exposition on a Unix socket, ``<directory>/<pid>.sock``, in a
  directory the ``serve`` process created for this run (:class:`WorkerMetrics` starts and stops
  that server with the app);
- the worker that gets the scrape reads its siblings' expositions (each within
  ``SIBLING_TIMEOUT_S``; a socket nobody answers on is a worker that is gone: skipped) and
  answers one merged exposition (:func:`merge`).

How series merge: counters, histograms and summaries add up across workers (``_created`` takes
the earliest); gauges add up (requests in flight, outstanding, pending records, the traffic
window's counts) except those that state a condition, which take the worst worker's view
(:data:`GAUGE_MERGE`); ``traffic_share_ratio`` is recomputed from the summed window counts. A
worker that restarts starts its counters at zero, which Prometheus's ``rate()`` reads as a reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from registry.metrics.labels import PREFIX

logger = logging.getLogger(__name__)

SIBLING_TIMEOUT_S = 2.0
#: Gauges that state a condition: the merged value is the worst worker's (any worker that sees
#: an upstream down or is cut off from the change feed shows in the merged series).
GAUGE_MERGE: dict[str, Callable[[Iterable[float]], float]] = {
    PREFIX + "upstream_up": min,
    PREFIX + "adapter_healthy": min,
    PREFIX + "change_feed_connected": min,
    PREFIX + "statistics_flush_lag_seconds": max,
}
SHARE = PREFIX + "traffic_share_ratio"
WINDOW_REQUESTS = PREFIX + "traffic_window_requests"

Exposition = Callable[[], bytes]
SampleKey = tuple[str, tuple[tuple[str, str], ...]]


def merge(expositions: Iterable[str]) -> list[Metric]:
    """The families of several workers' text expositions, merged (see the module doc)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[SampleKey, list[float]]] = {}
    for text in expositions:
        for family in text_string_to_metric_families(text):
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            samples = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                samples.setdefault(key, []).append(sample.value)
    for name, metric in families.items():
        combine = GAUGE_MERGE.get(name, sum) if metric.type == "gauge" else sum
        for (sample_name, labels), observed in values[name].items():
            value = min(observed) if sample_name.endswith("_created") else combine(observed)
            metric.add_sample(sample_name, dict(labels), value)
    if SHARE in families and WINDOW_REQUESTS in families:
        _recompute_shares(families[SHARE], families[WINDOW_REQUESTS])
    return list(families.values())


def _recompute_shares(share: Metric, window: Metric) -> None:
    counts = {s.labels.get("specialist", ""): s.value for s in window.samples}
    total = sum(counts.values())
    share.samples = []
    for specialist, count in sorted(counts.items()):
        if total > 0:
            share.add_sample(share.name, {"specialist": specialist}, count / total)


def render(families: list[Metric]) -> bytes:
    """``families`` in Prometheus's text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return generate_latest(registry)


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class WorkerMetrics:
    """This worker's exposition server, and the merged exposition of all workers of the run."""

    def __init__(self, directory: Path, own: Exposition) -> None:
        self.directory = directory
        self._own = own
        self._server: asyncio.AbstractServer | None = None
        self.socket_path = directory / f"{os.getpid()}.sock"

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # a previous worker with this pid
        self._server = await asyncio.start_unix_server(self._answer, path=str(self.socket_path))
        os.chmod(self.socket_path, 0o600)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(self._own())
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the asking worker went away
        finally:
            writer.close()

    async def exposition(self) -> bytes:
        """Every live worker's families, merged; this worker's own if it is the only one."""
        siblings = sorted(p for p in self.directory.glob("*.sock") if p != self.socket_path)
        texts = await asyncio.gather(*(self._read(path) for path in siblings))
        mine = self._own()
        others = [text for text in texts if text is not None]
        if not others:
            return mine
        return render(merge([mine.decode(), *others]))

    @staticmethod
    async def _read(path: Path) -> str | None:
        try:
            async with asyncio.timeout(SIBLING_TIMEOUT_S):
                reader, writer = await asyncio.open_unix_connection(str(path))
                try:
                    data = await reader.read()
                finally:
                    writer.close()
        except (OSError, TimeoutError) as exc:
            logger.info("worker metrics at %s not read: %s", path.name, exc)
            return None
        return data.decode()
