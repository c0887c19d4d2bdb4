"""Every Prometheus family the control plane exports, declared in one place.

:class:`ControlPlaneMetrics` owns a private :class:`prometheus_client.CollectorRegistry` (one per
app, so tests can build many apps) and the families below; the front door, the dispatcher, the
warm-up and the health monitor call its small ``observe_…``/``set_…`` methods, which only touch
memory (nothing here reads the database or the network on the request path).

Naming follows Prometheus conventions: the ``hi_moe_lora_`` prefix, base units in the name
(``_seconds``, ``_ratio``), ``_total`` on counters. Label values are bounded: adapter names and
versions come from the registry (``SPECIALIST_BASE`` for the base model,
``SPECIALIST_NONE`` for a request that named nothing routable), upstreams from the configured
``vllm_urls``, outcomes and tiers from fixed sets. Request ids and free text never become labels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Final, Literal, get_args

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from registry.metrics.labels import (
    PREFIX,
    SPECIALIST_BASE,
    SPECIALIST_NONE,
    LoadSource,
    RequestOutcome,
    UnloadOutcome,
    WarmupOutcome,
    outcome_of,
)
from registry.metrics.live import Backlog, LiveCollector, TrafficWindow

__all__ = ["SPECIALIST_BASE", "SPECIALIST_NONE", "ControlPlaneMetrics", "outcome_of"]

#: What became of a change notification (registry/fleet/change_feed.py).
ChangeNotificationOutcome = Literal["applied", "own", "malformed"]

#: Front-door latency: a few ms of proxying to minutes of generation.
LATENCY_BUCKETS_S: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip
#: Adapter loading: tens of ms (GPU, cached on the host) to seconds (cold disk, big ranks); the
#: 0.5 s bucket bound is the alert threshold (deploy/prometheus/alerts.yml).
LOAD_BUCKETS_S: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Dispatch decisions: sub-ms (keywords) to tens of ms (embeddings on a CPU).
DISPATCH_BUCKETS_S: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class ControlPlaneMetrics:
    """The control plane's metric families (see the module docstring for the conventions)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        p = PREFIX
        # ---- the request path (front door)
        self.requests = Counter(
            p + "requests",
            "Completion requests answered by the front door, by specialist, version and outcome.",
            ["specialist", "version", "outcome"],
            registry=r,
        )
        self.request_duration = Histogram(
            p + "request_duration_seconds",
            "End-to-end time of a completion request (to the last byte of a stream).",
            ["specialist"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            p + "time_to_first_token_seconds",
            "Time from a streamed request's arrival to its first relayed chunk.",
            ["specialist"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.client_requests = Counter(
            p + "client_requests",
            "Front-door requests (/v1) by client: the API key's name, _anonymous without one.",
            ["client"],
            registry=r,
        )
        self.in_flight = Gauge(
            p + "requests_in_flight",
            "Completion requests received and not yet answered in full.",
            registry=r,
        )
        self.adapter_cache_requests = Counter(
            p + "adapter_cache_requests",
            "Adapter requests whose version vLLM had already loaded on the chosen upstream (hit) "
            "or not (miss).",
            ["specialist", "result"],
            registry=r,
        )
        self.adapter_load = Histogram(
            p + "adapter_load_seconds",
            "Extra time to the first token when a version was not loaded yet (cold minus warm).",
            ["source"],
            buckets=LOAD_BUCKETS_S,
            registry=r,
        )
        # ---- the dispatcher (model="auto")
        self.dispatch_decisions = Counter(
            p + "dispatch_decisions",
            "Dispatch decisions of real requests, by the tier that decided and the specialist "
            "chosen (_base for a fallback).",
            ["tier", "specialist"],
            registry=r,
        )
        self.dispatch_fallbacks = Counter(
            p + "dispatch_fallbacks",
            "Dispatch decisions that fell back to the base model, by kind of reason.",
            ["reason"],
            registry=r,
        )
        self.dispatch_duration = Histogram(
            p + "dispatch_duration_seconds",
            "Time to decide which specialist serves a request.",
            buckets=DISPATCH_BUCKETS_S,
            registry=r,
        )
        self.routing_gaps = Counter(
            p + "routing_gaps",
            "Tasks no specialist matched, recorded as routing gaps.",
            registry=r,
        )
        # ---- operations: warm-up and health
        self.warmups = Counter(
            p + "warmup_requests",
            "Warm-up requests (one per adapter version and upstream), by outcome.",
            ["outcome"],
            registry=r,
        )
        self.bare_name_unloads = Counter(
            p + "bare_name_unloads",
            "Unloads of a bare adapter name on one replica after a promote or rollback "
            "(background, bounded), by outcome.",
            ["outcome"],
            registry=r,
        )
        self.foreign_bindings = Counter(
            p + "foreign_bindings",
            "Served names a replica had bound to weights the registry did not issue, unloaded by "
            "the health monitor, by outcome of the unload.",
            ["outcome"],
            registry=r,
        )
        self.upstream_up = Gauge(
            p + "upstream_up",
            "1 while the upstream's last health check passed (/health and /v1/models), else 0.",
            ["upstream"],
            registry=r,
        )
        self.adapter_healthy = Gauge(
            p + "adapter_healthy",
            "1 while the version's last probe on the upstream passed, else 0.",
            ["specialist", "version", "upstream"],
            registry=r,
        )
        self.health_probes = Counter(
            p + "health_probes",
            "Adapter probes run by the health monitor, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.upstream_routes = Counter(
            p + "upstream_routes",
            "Front-door requests by the replica that answered and why it was chosen "
            "(loaded, home, spill, least_outstanding, round_robin, failover).",
            ["upstream", "reason"],
            registry=r,
        )
        self.upstream_retries = Counter(
            p + "upstream_retries",
            "Non-streaming requests that failed on a replica after they were sent and were "
            "retried once on another, by the replica they failed on.",
            ["upstream"],
            registry=r,
        )
        self.upstream_outstanding = Gauge(
            p + "upstream_outstanding",
            "Front-door requests sent to the replica whose answer is not finished yet.",
            ["upstream"],
            registry=r,
        )
        # ---- the change feed (several instances on one PostgreSQL registry)
        self.change_notifications = Counter(
            p + "change_feed_notifications",
            "Change notifications this instance received from the shared registry, by outcome "
            "(applied: another instance's change, own: ignored, malformed: ignored).",
            ["outcome"],
            registry=r,
        )
        for feed_outcome in get_args(ChangeNotificationOutcome):
            self.change_notifications.labels(feed_outcome)
        self.change_feed_connected = Gauge(
            p + "change_feed_connected",
            "1 while this instance listens to the registry's change feed (PostgreSQL), else 0.",
            registry=r,
        )
        # statistics_flush_lag_seconds, statistics_pending, statistics_dropped_total and
        # traffic_share_ratio are read at scrape time: registry/metrics/live.py
        self._seen: set[tuple[str, str]] = set()
        self._traffic = TrafficWindow()
        self._live = LiveCollector(self._traffic)
        r.register(self._live)

    # ------------------------------------------------------------------ feeding

    def watch_backlog(self, writer: str, backlog: Backlog) -> None:
        """Export a background writer's lag, backlog and drops as ``writer``."""
        self._live.watch(writer, backlog)

    def request_finished(
        self, specialist: str, version: str, status: int, duration_s: float
    ) -> None:
        """One answered completion request (``version`` is ``""`` for the base model)."""
        if (specialist, version) not in self._seen:
            # every outcome exists from the first request on, so rate() sees the first error
            self._seen.add((specialist, version))
            for outcome in get_args(RequestOutcome):
                self.requests.labels(specialist, version, outcome)
        self.requests.labels(specialist, version, outcome_of(status)).inc()
        self.request_duration.labels(specialist).observe(duration_s)
        if specialist != SPECIALIST_NONE:
            self._traffic.add(specialist)

    def client_request(self, client: str) -> None:
        """One ``/v1`` request admitted for ``client`` (a token's name: bounded by the tokens
        an admin creates; ``_anonymous`` without one)."""
        self.client_requests.labels(client).inc()

    def first_token(self, specialist: str, seconds: float) -> None:
        self.time_to_first_token.labels(specialist).observe(seconds)

    def adapter_cache(self, specialist: str, hit: bool) -> None:
        self.adapter_cache_requests.labels(specialist, "hit" if hit else "miss").inc()

    def adapter_loaded(self, source: LoadSource, seconds: float) -> None:
        self.adapter_load.labels(source).observe(max(0.0, seconds))

    def dispatched(
        self,
        tier: str,
        specialist: str | None,
        fallback: str | None,
        seconds: float,
    ) -> None:
        """One decision for a real request (dry runs are not counted)."""
        self.dispatch_decisions.labels(tier, specialist or SPECIALIST_BASE).inc()
        if specialist is None and fallback is not None:
            self.dispatch_fallbacks.labels(fallback).inc()
        self.dispatch_duration.observe(seconds)

    def warmed(self, outcome: WarmupOutcome) -> None:
        self.warmups.labels(outcome).inc()

    def bare_name_unloaded(self, outcome: UnloadOutcome) -> None:
        self.bare_name_unloads.labels(outcome).inc()

    def foreign_binding_unloaded(self, outcome: UnloadOutcome) -> None:
        self.foreign_bindings.labels(outcome).inc()

    def upstream_routed(self, upstream: str, reason: str) -> None:
        """A request was answered by ``upstream``, chosen for ``reason`` (a route reason)."""
        self.upstream_routes.labels(upstream, reason).inc()

    def upstream_retried(self, upstream: str) -> None:
        self.upstream_retries.labels(upstream).inc()

    def watch_outstanding(self, upstreams: Sequence[tuple[str, Callable[[], float]]]) -> None:
        """Export each upstream's outstanding requests, read at scrape time."""
        for url, read in upstreams:
            self.upstream_outstanding.labels(url).set_function(read)

    def change_notification(self, outcome: ChangeNotificationOutcome) -> None:
        self.change_notifications.labels(outcome).inc()

    def change_feed_listening(self, connected: bool) -> None:
        self.change_feed_connected.set(1.0 if connected else 0.0)

    def upstream_checked(self, upstream: str, up: bool) -> None:
        self.upstream_up.labels(upstream).set(1.0 if up else 0.0)

    def adapter_probed(self, specialist: str, version: str, upstream: str, healthy: bool) -> None:
        self.adapter_healthy.labels(specialist, version, upstream).set(1.0 if healthy else 0.0)
        self.health_probes.labels("healthy" if healthy else "unhealthy").inc()

    def adapter_retired(self, specialist: str, version: str, upstream: str) -> None:
        """Stop exporting the health of a version that is no longer served."""
        with contextlib.suppress(KeyError):
            self.adapter_healthy.remove(specialist, version, upstream)

    # ------------------------------------------------------------------ exposition

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition of every family, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
