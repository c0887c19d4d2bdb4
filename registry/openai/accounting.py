"""What one front-door request tells the metrics: in flight, outcome, latency, TTFT, cache hits.

A :class:`RequestAccount` follows one completion request from arrival to its last byte and
feeds :class:`registry.metrics.families.ControlPlaneMetrics`; it only touches memory. An adapter
request is a cache *hit* when :class:`registry.fleet.loaded.LoadedAdapters` says vLLM already
had its version loaded on the replica that served it, else a *miss*. For a streamed miss the
extra time to the first token over the replica's typical warm first token
(:class:`WarmFirstTokens`) is observed as ``adapter_load_seconds{source="request"}``: an estimate
(prompts differ), where warm-up's cold-minus-warm measurement is exact.
"""

from __future__ import annotations

import time

from registry.fleet.loaded import LoadedAdapters
from registry.metrics.families import SPECIALIST_BASE, SPECIALIST_NONE, ControlPlaneMetrics
from registry.openai.targets import Target
from registry.statistics import EMA_ALPHA, fold_ema

#: Status counted for a client that went away before its answer was complete.
CLIENT_CLOSED = 499


class WarmFirstTokens:
    """Per replica: the EMA of streamed first-token times of cache hits."""

    def __init__(self) -> None:
        self._typical: dict[str, float] = {}

    def observe(self, replica_url: str, seconds: float) -> None:
        self._typical[replica_url] = fold_ema([seconds], EMA_ALPHA).apply(
            self._typical.get(replica_url)
        )

    def typical(self, replica_url: str) -> float | None:
        return self._typical.get(replica_url)


class RequestAccount:
    """One request's bookkeeping; :meth:`finished` may be called more than once (first wins)."""

    def __init__(
        self, metrics: ControlPlaneMetrics, loaded: LoadedAdapters, warm: WarmFirstTokens
    ) -> None:
        self._metrics = metrics
        self._loaded = loaded
        self._warm = warm
        self.started = time.perf_counter()
        self._target: Target | None = None
        self._replica: str | None = None
        self._hit: bool | None = None
        self._done = False
        metrics.in_flight.inc()

    @property
    def specialist(self) -> str:
        if self._target is None:
            return SPECIALIST_NONE
        return self._target.adapter or SPECIALIST_BASE

    def routed(self, target: Target) -> None:
        self._target = target

    def sent(self, replica_url: str) -> None:
        """vLLM at ``replica_url`` accepted the request: count an adapter cache hit or miss."""
        self._replica = replica_url
        target = self._target
        if target is not None and target.adapter is not None:
            self._hit = self._loaded.knows(replica_url, target.served_name)
            self._metrics.adapter_cache(target.adapter, self._hit)

    def first_chunk(self) -> None:
        """A stream's first chunk was relayed."""
        seconds = time.perf_counter() - self.started
        self._metrics.first_token(self.specialist, seconds)
        if self._replica is None or self._hit is None:
            return
        if self._hit:
            self._warm.observe(self._replica, seconds)
            return
        typical = self._warm.typical(self._replica)
        if typical is not None:
            self._metrics.adapter_loaded("request", seconds - typical)

    def finished(self, status: int) -> float:
        """The request was answered with ``status``; returns its latency in ms."""
        latency_s = time.perf_counter() - self.started
        if self._done:
            return latency_s * 1000.0
        self._done = True
        self._metrics.in_flight.dec()
        target = self._target
        version = (target.version or "") if target is not None else ""
        self._metrics.request_finished(self.specialist, version, status, latency_s)
        if status < 400 and target is not None and target.is_adapter and self._replica:
            self._loaded.mark(self._replica, target.served_name)
        return latency_s * 1000.0
