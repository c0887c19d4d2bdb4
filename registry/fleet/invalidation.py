"""Make vLLM forget a bare adapter name after its active version changed.

A client that talks to vLLM directly with a bare name (``model="python-lora"``) gets the version
the resolver plugin found at the first request, and vLLM keeps that mapping. After a promotion or
rollback the control plane calls ``POST /v1/unload_lora_adapter`` for the bare name on every
replica, so that the next such request goes to the resolver again. A versioned name
(``name@version``) never changes meaning while its version exists; after a delete the same
invalidator unloads it (:class:`registry.openai.versions.VersionDeleted`), so the version string
registered again later never meets the deleted weights; those unloads are counted in the same
family.

The promotion has committed by then, and the front door already routes to the new version; a
hung vLLM must not hold the admin answer. So the unloads run in the background, each replica's
bounded by ``deadline_s``; the promote/rollback call waits for them at most ``wait_s`` (enough
for healthy replicas, so a direct client's very next request re-resolves). Each replica's
outcome is logged and counted (``hi_moe_lora_bare_name_unloads_total{outcome}``); unloads still
running at shutdown are cancelled (:meth:`BareNameInvalidator.stop`).
"""

from __future__ import annotations

import asyncio
import logging

from registry.fleet.upstreams import (
    Replica,
    UpstreamPool,
    UpstreamResponse,
    UpstreamUnavailable,
    describe_failure,
)
from registry.metrics.families import ControlPlaneMetrics
from registry.metrics.labels import UnloadOutcome

logger = logging.getLogger(__name__)

UNLOAD_PATH = "/v1/unload_lora_adapter"
#: Bound on one replica's unload request, in all (connect, send, answer).
UNLOAD_DEADLINE_S = 10.0
#: How long a promote/rollback waits for the unloads before answering; they go on after it.
UNLOAD_WAIT_S = 0.5


class BareNameInvalidator:
    """``on_active_changed`` hook of the adapter service; holds its background unloads."""

    def __init__(
        self,
        upstream: UpstreamPool,
        metrics: ControlPlaneMetrics | None = None,
        *,
        deadline_s: float = UNLOAD_DEADLINE_S,
        wait_s: float = UNLOAD_WAIT_S,
    ) -> None:
        self._upstream = upstream
        self._metrics = metrics
        self._deadline_s = deadline_s
        self._wait_s = wait_s
        self._running: set[asyncio.Task[None]] = set()

    async def __call__(self, name: str) -> None:
        """Start unloading ``name`` on every replica; return when done or after ``wait_s``.

        Never raises (the promotion already committed).
        """
        task = asyncio.get_running_loop().create_task(self.unload(name), name=f"unload {name}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        await asyncio.wait({task}, timeout=self._wait_s)

    @property
    def pending(self) -> int:
        """Unloads still running in the background."""
        return len(self._running)

    async def drain(self) -> None:
        """Wait for the background unloads (each ends within ``deadline_s``)."""
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    async def stop(self) -> None:
        """Cancel the unloads still running (shutdown)."""
        tasks = list(self._running)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def unload(self, name: str) -> None:
        """Unload ``name`` on every replica, each within ``deadline_s``; log every outcome."""
        try:
            results = await self._upstream.broadcast(
                "POST", UNLOAD_PATH, {"lora_name": name}, timeout_s=self._deadline_s
            )
        except Exception:
            logger.exception("could not ask vLLM to forget adapter %r", name)
            return
        for replica, result in results:
            self._report(name, replica, result)

    def _report(self, name: str, replica: Replica, result: UpstreamResponse | Exception) -> None:
        if isinstance(result, Exception):
            self._count("failed")
            logger.warning(
                "vLLM %s: unloading %r failed: %s (the change stands; clients calling vLLM"
                " directly by the bare name may get the previous version until it is unloaded)",
                replica.url,
                name,
                self._describe(result),
            )
        elif result.status_code == 200:
            self._count("unloaded")
            logger.info("vLLM %s forgot adapter %r", replica.url, name)
        elif result.status_code == 404:
            # never loaded under its bare name on this replica: nothing to forget
            self._count("not_loaded")
            logger.debug("vLLM %s had not loaded %r", replica.url, name)
        else:
            self._count("failed")
            logger.warning(
                "vLLM %s: unloading %r answered HTTP %d: %s",
                replica.url,
                name,
                result.status_code,
                result.text[:500],
            )

    def _count(self, outcome: UnloadOutcome) -> None:
        if self._metrics is not None:
            self._metrics.bare_name_unloaded(outcome)

    def _describe(self, exc: Exception) -> str:
        if isinstance(exc, UpstreamUnavailable):
            return exc.message
        if isinstance(exc, TimeoutError) and not str(exc):
            return f"no answer within {self._deadline_s:g} s"
        return describe_failure(exc)
