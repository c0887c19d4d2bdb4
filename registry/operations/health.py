"""Probe-based health of every vLLM upstream and of every served adapter version on it.

:class:`HealthMonitor` runs off the request path. Every ``interval_s`` (and every
``down_recheck_s`` for an upstream found down, and at once after a change of what is served)
it checks each upstream:

1. ``GET /health`` and ``GET /v1/models`` answer 200, else the upstream is down (with the
   reason); ``/v1/models`` also tells which adapter names vLLM has loaded
   (:class:`registry.fleet.loaded.LoadedAdapters`, with the adapters the engine runs or
   queues, from ``/metrics``: :mod:`registry.fleet.lora_info`) and from which paths: a name of
   ours bound to weights the registry did not issue is unloaded first
   (:mod:`registry.operations.bindings`);
2. the base model's answer to a fixed short prompt (greedy, a few tokens), computed once per
   upstream and base model (again after the upstream was down);
3. a probe of every served adapter version (:func:`registry.operations.served.served_versions`)
   on the replicas requests for it go to (with adapter affinity, where it is loaded, else its
   home replica: probes must not load every version everywhere; step 1 has run for every
   upstream of the round before any probe, so "up" is this round's picture of all of them):
   the same prompt through the adapter, which must answer 200 with output that differs from the
   base model's: identical output means the adapter has no effect (zero weights, or vLLM served
   the base model) and an error means vLLM could not load it. Before probing, the version's
   artifact is checked on disk (present, checksum as registered); a broken one is not probed
   but quarantined (:mod:`registry.fleet.quarantine`): vLLM's engine dies reloading it.

Probes run with bounded concurrency and their own timeout, straight to the upstream (not through
the front door), so they never count as user traffic. The verdicts feed the upstream pool (a
replica found down is skipped, and requests fail fast with 503 when all are), readiness, the
``/v1/health`` report and the ``hi_moe_lora_upstream_up`` / ``hi_moe_lora_adapter_healthy``
gauges. When an upstream comes (back) up, the ``on_upstream_up`` listeners run (warm-up).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from registry.errors import DatabaseUnavailable
from registry.fleet.completions import Completion, greedy_completion
from registry.fleet.invalidation import UNLOAD_DEADLINE_S
from registry.fleet.loaded import LoadedAdapters
from registry.fleet.lora_info import active_adapters
from registry.fleet.model_cards import adapter_cards, base_model_ids, served_base_name
from registry.fleet.quarantine import Quarantine
from registry.fleet.upstreams import Replica, UpstreamPool, UpstreamUnavailable
from registry.metrics.families import ControlPlaneMetrics
from registry.operations.artifacts import ArtifactCheck
from registry.operations.bindings import BindingGuard
from registry.operations.health_picture import AdapterHealth, FleetHealth, UpstreamHealth
from registry.operations.served import served_versions
from registry.services.adapters import AdapterService
from registry.services.records import AdapterInfo, AdapterVersionInfo
from registry.waiting import wait_event

logger = logging.getLogger(__name__)

#: The fixed probe prompt: plain text every tokenizer handles, sent to ``/v1/completions``.
PROBE_PROMPT = "The capital of France is"

UpListener = Callable[[Replica], Awaitable[None]]
#: Whether a version (served name) is probed on a replica (the routing's affinity).
ProbesHere = Callable[[Replica, str], bool]


@dataclass(frozen=True)
class HealthSettings:
    interval_s: float = 30.0
    #: How often an upstream found down is checked again (instead of every ``interval_s``).
    down_recheck_s: float = 2.0
    probe_timeout_s: float = 10.0
    probe_concurrency: int = 4
    probe_tokens: int = 8
    #: Bound on unloading a foreign binding on one replica.
    unload_timeout_s: float = UNLOAD_DEADLINE_S
    #: An upstream never seen up is logged as starting (info) until this long after its first
    #: check, then warned about once: vLLM may come up after the control plane (its resolver asks
    #: the registry) and loading a large base model takes minutes.
    start_grace_s: float = 600.0


@dataclass
class _Reference:
    """The base model's probe answer on one upstream."""

    base_model: str
    text: str


@dataclass
class _UpstreamState:
    health: UpstreamHealth
    reference: _Reference | None = None
    exported: set[tuple[str, str]] = field(default_factory=set)
    #: monotonic time of the first check that found it down while it had never been up
    waiting_since: float | None = None
    #: whether "still not up" was warned about (once per start)
    late_warned: bool = False


class HealthMonitor:
    """Checks every upstream and served adapter version, in the background."""

    def __init__(
        self,
        adapters: AdapterService,
        upstreams: UpstreamPool,
        loaded: LoadedAdapters,
        metrics: ControlPlaneMetrics,
        quarantine: Quarantine,
        settings: HealthSettings,
        *,
        base_model: str | None = None,
        probes_here: ProbesHere | None = None,
    ) -> None:
        """``probes_here``: whether to probe a version on a replica (default: everywhere);
        with adapter affinity, where requests for it go (:meth:`ReplicaChooser.serves_here`)."""
        self._adapters = adapters
        self._probes_here = probes_here
        self._upstreams = upstreams
        self._loaded = loaded
        self._metrics = metrics
        self._settings = settings
        self._configured_base = base_model
        self._artifacts = ArtifactCheck()
        self._quarantine = quarantine
        self._bindings = BindingGuard(
            adapters, upstreams, metrics, quarantine, unload_timeout_s=settings.unload_timeout_s
        )
        self._state = {
            r.url: _UpstreamState(UpstreamHealth(r.url, None)) for r in upstreams.replicas
        }
        self._listeners: list[UpListener] = []
        self._task: asyncio.Task[None] | None = None
        self._notifying: set[asyncio.Task[None]] = set()
        self._round_lock = asyncio.Lock()
        # the registry as last read: rounds go on with it while the database is unavailable
        self._registered: list[AdapterInfo] = []
        self._fleet_changed = asyncio.Event()

    def add_up_listener(self, listener: UpListener) -> None:
        """Called (in the background) each time an upstream is found up after being down or
        unchecked: vLLM (re)started with no adapter loaded."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ reading

    def snapshot(self) -> FleetHealth:
        return FleetHealth(tuple(self._state[r.url].health for r in self._upstreams.replicas))

    def any_upstream_up(self) -> bool:
        return any(state.health.up for state in self._state.values())

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        """Start checking in the background (the first round begins at once)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="health")

    async def stop(self) -> None:
        """Stop checking; listeners still running (a warm-up) are cancelled."""
        tasks = [*self._notifying, *([self._task] if self._task is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None

    async def _run(self) -> None:
        settings = self._settings
        next_full = 0.0
        while True:
            try:
                if time.monotonic() >= next_full:
                    next_full = time.monotonic() + settings.interval_s
                    await self.check_now()
                else:
                    down = [r for r in self._upstreams.replicas if r.healthy is False]
                    await self.check_now(down)
            except Exception:  # the monitor must outlive any single failure
                logger.exception("health check round failed")
            any_down = any(r.healthy is False for r in self._upstreams.replicas)
            delay = next_full - time.monotonic()
            if any_down:
                delay = min(delay, settings.down_recheck_s)
            if await wait_event(self._fleet_changed, delay):
                self._fleet_changed.clear()
                next_full = 0.0  # what is served changed: probe it now, not in an interval

    async def served_changed(self, name: str) -> None:
        """Adapter-service listener: what ``name`` serves changed, so check again soon (a
        promoted version's health is known within seconds, not an interval)."""
        self._fleet_changed.set()

    # ------------------------------------------------------------------ one round

    async def check_now(self, replicas: Sequence[Replica] | None = None) -> FleetHealth:
        """Check ``replicas`` (default: all) now, adapters included, and return the picture."""
        async with self._round_lock:
            targets = list(self._upstreams.replicas if replicas is None else replicas)
            if targets:
                registered = await self._registry()
                versions = served_versions(registered)
                artifacts = await asyncio.to_thread(self._artifacts.problems, versions)
                self._quarantine.replace(artifacts)
                semaphore = asyncio.Semaphore(self._settings.probe_concurrency)
                # every server first, then the probes: where a probe goes (affinity) depends on
                # which replicas are up, so it must see this round's picture of all of them
                # (a replica checked first would otherwise take the probes of a version whose
                # home is a replica that just came up and is not yet marked so)
                servers = await asyncio.gather(*(self._check(r, registered) for r in targets))
                await asyncio.gather(
                    *(
                        self._check_adapters(r, *server, versions, artifacts, semaphore)
                        for r, server in zip(targets, servers, strict=True)
                        if server is not None
                    )
                )
            return self.snapshot()

    async def _registry(self) -> list[AdapterInfo]:
        """The registry's adapters; while the database is unavailable, the last reading (the
        upstreams are still checked, and what was served is still probed)."""
        try:
            self._registered = await self._adapters.list_adapters()
        except DatabaseUnavailable as exc:  # logged once per outage by the database itself
            logger.debug("health round uses the last registry reading: %s", exc)
        return self._registered

    async def _check(
        self, replica: Replica, registered: Sequence[AdapterInfo]
    ) -> tuple[str | None, UpstreamHealth] | None:
        """The server itself: up or down, its base model, its bindings and loaded adapters.
        Returns its base model and health (adapters not yet probed), or None when it is down."""
        state = self._state[replica.url]
        was_up = state.health.up
        started = time.perf_counter()
        # (names loaded while the listing is read, by a warm-up or a request, are kept by it)
        read_since = self._loaded.now()
        problem, models = await self._server_problem(replica)
        latency_ms = (time.perf_counter() - started) * 1000.0
        now = datetime.now(timezone.utc)
        if problem is not None:
            self._log_down(replica, state, problem)
            state.reference = None
            self._loaded.forget(replica.url)
            self._bindings.forget(replica)
            self._set_replica(replica, state, UpstreamHealth(replica.url, False, problem, now))
            self._retire_all(replica, state)
            return None
        base = self._base_name(models)
        cards = adapter_cards(models)
        # before any probe: a probe (or warm-up) must meet the registry's weights
        bindings = await self._bindings.check(replica, cards, registered)
        removed = {f.served_name for f in bindings.foreign if f.removed}
        self._loaded.replace(replica.url, [c.name for c in cards], read_since)
        for name in removed:  # (unloaded after the listing, whenever it was marked)
            self._loaded.unload(replica.url, name)
        for name in await self._engine_adapters(replica):
            if name not in removed:
                self._loaded.mark(replica.url, name)
        health = UpstreamHealth(
            replica.url,
            True,
            None,
            now,
            round(latency_ms, 2),
            base,
            foreign=bindings.foreign,
            outside=bindings.outside,
        )
        self._set_replica(replica, state, replace(health, adapters=state.health.adapters))
        if was_up is not True:
            logger.info("vLLM upstream %s is up (%s)", replica.url, base)
            state.waiting_since, state.late_warned = None, False
            for listener in list(self._listeners):
                task = asyncio.get_running_loop().create_task(self._notify(listener, replica))
                self._notifying.add(task)
                task.add_done_callback(self._notifying.discard)
        return base, health

    def _log_down(self, replica: Replica, state: _UpstreamState, problem: str) -> None:
        """A warning when an upstream that was up goes down; one that has not come up yet
        (starting after the control plane) is logged as starting, and warned about once when
        it is still not up ``start_grace_s`` after the first check."""
        now = time.monotonic()
        if state.health.up is True:
            logger.warning("vLLM upstream %s is down: %s", replica.url, problem)
            state.waiting_since, state.late_warned = now, True  # this outage is warned about
            return
        if state.waiting_since is None:
            state.waiting_since = now
            logger.info(
                "vLLM upstream %s is not up yet (%s); waiting for it to start",
                replica.url,
                problem,
            )
        elif not state.late_warned and now - state.waiting_since >= self._settings.start_grace_s:
            state.late_warned = True
            logger.warning(
                "vLLM upstream %s is still not up %.0f s after the first check: %s",
                replica.url,
                now - state.waiting_since,
                problem,
            )

    async def _check_adapters(
        self,
        replica: Replica,
        base: str | None,
        health: UpstreamHealth,
        versions: Sequence[AdapterVersionInfo],
        artifacts: dict[str, str],
        semaphore: asyncio.Semaphore,
    ) -> None:
        """Probe the served versions that belong on ``replica`` (which is up)."""
        state = self._state[replica.url]
        if self._probes_here is not None:
            versions = [v for v in versions if self._probes_here(replica, v.served_name)]
        verdicts = await self._probe_all(replica, state, base, versions, artifacts, semaphore)
        self._set_replica(replica, state, replace(health, adapters=verdicts))
        self._retire_missing(replica, state, verdicts)

    async def _notify(self, listener: UpListener, replica: Replica) -> None:
        try:
            await listener(replica)
        except Exception:
            logger.exception("upstream-up listener failed for %s", replica.url)

    def _set_replica(self, replica: Replica, state: _UpstreamState, health: UpstreamHealth) -> None:
        state.health = health
        replica.healthy = health.up
        replica.health_reason = health.reason
        self._metrics.upstream_checked(replica.url, bool(health.up))

    async def _server_problem(self, replica: Replica) -> tuple[str | None, Any]:
        """Why the server is unusable (``None`` if it is usable), and its ``/v1/models``."""
        timeout_s = self._settings.probe_timeout_s
        try:
            health = await self._upstreams.send_to(replica, "GET", "/health", timeout_s=timeout_s)
            if health.status_code != 200:
                return f"GET /health: {health.failure()}", None
            models = await self._upstreams.send_to(
                replica, "GET", "/v1/models", timeout_s=timeout_s
            )
        except UpstreamUnavailable as exc:
            return exc.message, None
        if models.status_code != 200:
            return f"GET /v1/models: {models.failure()}", None
        try:
            return None, models.json()
        except ValueError:
            return "GET /v1/models answered something that is not JSON", None

    async def _engine_adapters(self, replica: Replica) -> frozenset[str]:
        """The adapters vLLM's engine runs or queues (``vllm:lora_requests_info``); a
        ``/metrics`` that cannot be read tells nothing (the replica is not down for it)."""
        try:
            answer = await self._upstreams.send_to(
                replica, "GET", "/metrics", timeout_s=self._settings.probe_timeout_s
            )
        except UpstreamUnavailable:
            return frozenset()
        return active_adapters(answer.text) if answer.status_code == 200 else frozenset()

    def _base_name(self, models: Any) -> str | None:
        return served_base_name(base_model_ids(models), self._configured_base)

    # ------------------------------------------------------------------ adapter probes

    async def _probe_all(
        self,
        replica: Replica,
        state: _UpstreamState,
        base: str | None,
        versions: Sequence[AdapterVersionInfo],
        artifacts: dict[str, str],
        semaphore: asyncio.Semaphore,
    ) -> tuple[AdapterHealth, ...]:
        if not versions:
            return ()
        reference: _Reference | None = None
        reference_problem = "vLLM lists no base model"
        if base is not None:
            reference, reference_problem = await self._reference(replica, state, base, semaphore)

        async def one(version: AdapterVersionInfo) -> AdapterHealth:
            artifact_problem = artifacts.get(version.served_name)
            if artifact_problem is not None:
                return self._verdict(replica, version, artifact_problem, None)
            if reference is None:
                reason = f"cannot compare with the base model: {reference_problem}"
                return self._verdict(replica, version, reason, None)
            async with semaphore:
                return await self._probe(replica, version, reference)

        return tuple(await asyncio.gather(*(one(v) for v in versions)))

    async def _reference(
        self, replica: Replica, state: _UpstreamState, base: str, semaphore: asyncio.Semaphore
    ) -> tuple[_Reference | None, str]:
        if state.reference is not None and state.reference.base_model == base:
            return state.reference, ""
        async with semaphore:
            answer = await self._complete(replica, base)
        text, problem = answer.text, answer.problem
        if text is None:
            logger.warning("base-model probe on %s failed: %s", replica.url, problem)
            return None, f"the base model's probe failed: {problem}"
        state.reference = _Reference(base, text)
        return state.reference, ""

    async def _probe(
        self, replica: Replica, version: AdapterVersionInfo, reference: _Reference
    ) -> AdapterHealth:
        answer = await self._complete(replica, version.served_name)
        text, problem, latency_ms = answer.text, answer.problem, answer.elapsed_ms
        if text is None:
            return self._verdict(replica, version, f"vLLM could not serve it: {problem}", None)
        self._loaded.mark(replica.url, version.served_name)
        if text == reference.text:
            reason = (
                "it answers exactly as the base model does: the adapter has no effect "
                "(zero weights), or vLLM served the base model instead"
            )
            return self._verdict(replica, version, reason, latency_ms)
        return self._verdict(replica, version, None, latency_ms)

    async def _complete(self, replica: Replica, model: str) -> Completion:
        return await greedy_completion(
            self._upstreams,
            replica,
            model,
            PROBE_PROMPT,
            max_tokens=self._settings.probe_tokens,
            timeout_s=self._settings.probe_timeout_s,
        )

    def _verdict(
        self,
        replica: Replica,
        version: AdapterVersionInfo,
        reason: str | None,
        latency_ms: float | None,
    ) -> AdapterHealth:
        healthy = reason is None
        if not healthy:
            logger.warning("%s on %s is unhealthy: %s", version.served_name, replica.url, reason)
        self._metrics.adapter_probed(version.name, version.version, replica.url, healthy)
        return AdapterHealth(
            version.name,
            version.version,
            version.served_name,
            healthy,
            reason,
            latency_ms,
            datetime.now(timezone.utc),
        )

    # ------------------------------------------------------------------ gauges of retired versions

    def _retire_missing(
        self, replica: Replica, state: _UpstreamState, verdicts: Sequence[AdapterHealth]
    ) -> None:
        current = {(a.adapter, a.version) for a in verdicts}
        for adapter, version in state.exported - current:
            self._metrics.adapter_retired(adapter, version, replica.url)
        state.exported = current

    def _retire_all(self, replica: Replica, state: _UpstreamState) -> None:
        for adapter, version in state.exported:
            self._metrics.adapter_retired(adapter, version, replica.url)
        state.exported = set()
