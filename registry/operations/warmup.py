"""Adapter warm-up: load the versions that will be served first before users ask for them.

The plan (:meth:`WarmUp.plan`) is the served versions most recently used, as many as vLLM holds
in host memory (``--max-cpu-loras``; vLLM's default, and ours, is ``--max-loras``, its GPU
slots), or the adapters an operator names (``name`` = the versions it serves, ``name@version`` =
that one). A version vLLM holds in host memory but not in a slot costs a request a copy into a
slot; one it does not hold costs a read from disk through the resolver first (the cold-load
tail, benchmarks/README.md). A run (:meth:`WarmUp.run`) sends one 1-token completion per version
to every upstream, with bounded concurrency and its own timeout, straight to the upstream (never
counted as user traffic), the last target first: vLLM keeps the most recently used versions in
its slots, so those the plan puts first end there. A version that vLLM had not loaded yet on
that upstream gets a second request at once; cold minus warm is its load latency
(``hi_moe_lora_adapter_load_seconds{source="warmup"}``).

Runs happen in the background: the plan when an upstream comes (back) up (the health monitor
tells: a (re)started vLLM holds nothing), and after every change of what an adapter serves
(promote, rollback, traffic split, a first version) that adapter's served versions first, then
the plan; a background run leaves out what the replica already has loaded (sending it again
would only make vLLM reload versions it holds). And on demand (``POST /admin/v1/warmup``).
Failures are logged and reported, never raised: warm-up never blocks or breaks serving.
Versions the health monitor quarantined (broken files) are skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from registry.errors import NotFoundError
from registry.fleet.completions import greedy_completion
from registry.fleet.loaded import LoadedAdapters
from registry.fleet.quarantine import Quarantine
from registry.fleet.upstreams import Replica, UpstreamPool
from registry.metrics.families import ControlPlaneMetrics
from registry.operations.served import by_recent_use, served_versions
from registry.services.adapters import AdapterService
from registry.services.records import AdapterVersionInfo

logger = logging.getLogger(__name__)

WARMUP_PROMPT = "Hello"


@dataclass(frozen=True)
class WarmUpSettings:
    #: vLLM's ``--max-loras`` (GPU slots).
    max_loras: int = 4
    #: vLLM's ``--max-cpu-loras`` (versions held in host memory); None: ``max_loras``.
    max_cpu_loras: int | None = None
    concurrency: int = 4
    timeout_s: float = 120.0

    @property
    def plan_size(self) -> int:
        """How many versions the default plan warms: as many as vLLM holds."""
        return max(self.max_loras, self.max_cpu_loras or self.max_loras)


@dataclass(frozen=True)
class WarmTarget:
    adapter: str
    version: str
    served_name: str


@dataclass(frozen=True)
class WarmResult:
    target: WarmTarget
    upstream: str
    outcome: Literal["loaded", "failed"]
    time_ms: float
    #: cold minus warm first token, when vLLM had not loaded the version before
    load_ms: float | None = None
    detail: str | None = None


@dataclass(frozen=True)
class WarmUpReport:
    reason: str
    targets: tuple[WarmTarget, ...]
    upstreams: tuple[str, ...]
    results: tuple[WarmResult, ...]
    started_at: datetime
    time_ms: float

    @property
    def loaded(self) -> int:
        return sum(1 for r in self.results if r.outcome == "loaded")

    @property
    def failed(self) -> int:
        return sum(1 for r in self.results if r.outcome == "failed")


ResultListener = Callable[[WarmResult], None]


def _target(version: AdapterVersionInfo) -> WarmTarget:
    return WarmTarget(version.name, version.version, version.served_name)


class WarmUp:
    """Plans and runs warm-ups; keeps the last report."""

    def __init__(
        self,
        adapters: AdapterService,
        upstreams: UpstreamPool,
        loaded: LoadedAdapters,
        metrics: ControlPlaneMetrics,
        quarantine: Quarantine,
        settings: WarmUpSettings,
    ) -> None:
        self._quarantine = quarantine
        self._adapters = adapters
        self._upstreams = upstreams
        self._loaded = loaded
        self._metrics = metrics
        self._settings = settings
        self._fleet_run: asyncio.Task[None] | None = None
        self._changed: set[str] = set()
        self._runs: set[asyncio.Task[WarmUpReport]] = set()
        self.last_report: WarmUpReport | None = None

    @property
    def replicas(self) -> list[Replica]:
        """The upstreams a run warms by default."""
        return list(self._upstreams.replicas)

    # ------------------------------------------------------------------ planning

    async def plan(self, names: Sequence[str] | None = None) -> list[WarmTarget]:
        """The versions to warm: the most recently used served versions (not quarantined ones),
        as many as vLLM holds (:attr:`WarmUpSettings.plan_size`), most recent first; or the
        ones ``names`` designate. An unknown name raises
        :class:`registry.errors.NotFoundError` before anything is sent."""
        if names is None:
            served = served_versions(await self._adapters.list_adapters())
            servable = [v for v in served if self._quarantine.reason(v.served_name) is None]
            chosen = by_recent_use(servable)[: self._settings.plan_size]
            return [_target(v) for v in chosen]
        targets: list[WarmTarget] = []
        for name in dict.fromkeys(names):
            if "@" in name:
                adapter, _, version = name.partition("@")
                targets.append(_target(await self._adapters.get_version(adapter, version)))
            else:
                info = await self._adapters.get_adapter(name)
                targets.extend(_target(v) for v in served_versions([info]))
        return list(dict.fromkeys(targets))

    # ------------------------------------------------------------------ running

    async def run(
        self,
        targets: Sequence[WarmTarget],
        *,
        replicas: Sequence[Replica] | None = None,
        reason: str = "on demand",
        on_result: ResultListener | None = None,
        skip_loaded: bool = False,
    ) -> WarmUpReport:
        """Warm ``targets`` on ``replicas`` (default: every upstream); never raises. The
        requests go out last target first, so the first targets are the last vLLM loads and
        the ones its slots hold (results come in that order).

        ``skip_loaded``: leave out the pairs whose version the replica already has loaded (a
        background run must not make vLLM reload what it holds); on demand, every pair is sent.
        """
        replicas = list(self._upstreams.replicas if replicas is None else replicas)
        started_at = datetime.now(timezone.utc)
        started = time.perf_counter()
        semaphore = asyncio.Semaphore(self._settings.concurrency)

        async def one(target: WarmTarget, replica: Replica) -> WarmResult:
            async with semaphore:
                try:
                    result = await self._warm(target, replica)
                except Exception as exc:  # reported, never raised
                    logger.exception("warm-up of %s on %s failed", target.served_name, replica.url)
                    detail = f"internal error: {type(exc).__name__}: {exc}"
                    result = WarmResult(target, replica.url, "failed", 0.0, detail=detail)
            self._metrics.warmed(result.outcome)
            if on_result is not None:
                on_result(result)
            return result

        pairs = [
            (t, r)
            for t in reversed(targets)
            for r in replicas
            if not (skip_loaded and self._loaded.knows(r.url, t.served_name))
        ]
        results = await asyncio.gather(*(one(t, r) for t, r in pairs))
        report = WarmUpReport(
            reason,
            tuple(targets),
            tuple(r.url for r in replicas),
            tuple(results),
            started_at,
            round((time.perf_counter() - started) * 1000.0, 2),
        )
        self.last_report = report
        log = logger.warning if report.failed else logger.info
        log(
            "warm-up (%s): %d loaded, %d failed, %.0f ms",
            reason,
            report.loaded,
            report.failed,
            report.time_ms,
        )
        return report

    async def _warm(self, target: WarmTarget, replica: Replica) -> WarmResult:
        quarantined = self._quarantine.reason(target.served_name)
        if quarantined is not None:
            return WarmResult(target, replica.url, "failed", 0.0, detail=quarantined)
        if replica.healthy is False:
            detail = f"upstream is down: {replica.health_reason}"
            return WarmResult(target, replica.url, "failed", 0.0, detail=detail)
        was_loaded = self._loaded.knows(replica.url, target.served_name)
        cold_ms, problem = await self._one_token(target, replica)
        if problem is not None:
            logger.warning(
                "warm-up of %s on %s failed: %s", target.served_name, replica.url, problem
            )
            return WarmResult(target, replica.url, "failed", cold_ms, detail=problem)
        self._loaded.mark(replica.url, target.served_name)
        load_ms: float | None = None
        if not was_loaded:
            warm_ms, problem = await self._one_token(target, replica)
            if problem is None:
                load_ms = round(max(0.0, cold_ms - warm_ms), 2)
                self._metrics.adapter_loaded("warmup", load_ms / 1000.0)
        return WarmResult(target, replica.url, "loaded", cold_ms, load_ms)

    async def _one_token(self, target: WarmTarget, replica: Replica) -> tuple[float, str | None]:
        answer = await greedy_completion(
            self._upstreams,
            replica,
            target.served_name,
            WARMUP_PROMPT,
            max_tokens=1,
            timeout_s=self._settings.timeout_s,
        )
        return answer.elapsed_ms, answer.problem

    # ------------------------------------------------------------------ background triggers

    async def upstream_up(self, replica: Replica) -> None:
        """A (re)started vLLM has nothing loaded: warm the plan on it (health-monitor listener)."""
        targets = await self.plan()
        if targets:
            reason = f"{replica.url} came up"
            await self.run(targets, replicas=[replica], reason=reason, skip_loaded=True)

    async def served_changed(self, name: str) -> None:
        """What ``name`` serves changed (adapter-service listener): warm its served versions in
        the background, so a promoted version is loaded before its traffic arrives.

        Changes that arrive while a run is going are gathered into one more run after it.
        """
        self._changed.add(name)
        if self._fleet_run is None or self._fleet_run.done():
            self._fleet_run = asyncio.get_running_loop().create_task(self._fleet_loop())

    async def _fleet_loop(self) -> None:
        while self._changed:
            names, self._changed = sorted(self._changed), set()
            try:
                # the changed adapters' served versions first, then the usual plan: the
                # versions vLLM should hold now (those it holds already are skipped)
                changed = await self.plan(names)
                room = max(self._settings.plan_size, len(changed))
                targets = list(dict.fromkeys([*changed, *await self.plan()]))[:room]
                up = [r for r in self._upstreams.replicas if r.healthy is not False]
                if targets and up:
                    reason = f"{', '.join(names)} changed"
                    await self.run(targets, replicas=up, reason=reason, skip_loaded=True)
            except NotFoundError:
                logger.info("warm-up skipped: %s no longer registered", ", ".join(names))
            except Exception:
                logger.exception("background warm-up failed")

    def start_run(
        self, targets: Sequence[WarmTarget], on_result: ResultListener
    ) -> asyncio.Task[WarmUpReport]:
        """:meth:`run` as a task that finishes even if its caller goes away (a client that
        left a streamed warm-up); held until done, cancelled by :meth:`stop`."""
        task = asyncio.get_running_loop().create_task(self.run(targets, on_result=on_result))
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)
        return task

    async def stop(self) -> None:
        tasks = [*self._runs, *([self._fleet_run] if self._fleet_run is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
