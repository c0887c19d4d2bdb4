"""Per-request outcomes (latency, success), recorded off the request's path.

The front door hands every finished request to :meth:`OutcomeRecorder.record`, which only
appends it to a buffer; a background task writes the buffer to the registry's statistics every
``flush_interval_s`` (or at :meth:`drain`), so a slow or failing statistics write never delays or
breaks a request, and each flush is one ``record_outcomes`` call (one transaction) instead of one
write per request. This is also where request metrics (Prometheus) plug in: the recorder sees
every finished request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from registry.openai.targets import Target
from registry.services.adapters import AdapterService

logger = logging.getLogger(__name__)

#: Outcomes waiting to be written beyond this are dropped (with a warning) rather than queued.
MAX_PENDING = 10_000
FLUSH_INTERVAL_S = 0.5

OutcomeRow = tuple[str, float, bool]


@dataclass(frozen=True)
class Outcome:
    target: Target
    endpoint: str
    status: int
    latency_ms: float
    stream: bool

    @property
    def ok(self) -> bool:
        return self.status < 400

    def row(self) -> OutcomeRow:
        return (self.target.served_name, self.latency_ms, self.ok)


class OutcomeRecorder:
    """Buffers finished requests and writes them to the registry in the background."""

    def __init__(
        self,
        adapters: AdapterService,
        *,
        max_pending: int = MAX_PENDING,
        flush_interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        self._adapters = adapters
        self._max_pending = max_pending
        self._flush_interval_s = flush_interval_s
        self._buffer: list[Outcome] = []
        self._writing = 0
        self._flusher: asyncio.Task[None] | None = None
        self._flush_now = asyncio.Event()
        self._dropped = 0

    @property
    def pending(self) -> int:
        """Outcomes recorded but not yet written."""
        return len(self._buffer) + self._writing

    def record(self, outcome: Outcome) -> None:
        if not outcome.target.is_adapter:
            return
        if self.pending >= self._max_pending:
            self._dropped += 1
            if self._dropped in (1, 100) or self._dropped % 10_000 == 0:
                logger.warning("outcome backlog full: %d outcomes dropped", self._dropped)
            return
        self._buffer.append(outcome)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while self._buffer:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._flush_now.wait(), self._flush_interval_s)
            self._flush_now.clear()
            batch, self._buffer = self._buffer, []
            self._writing = len(batch)
            try:
                await self._write(batch)
            finally:
                self._writing = 0

    async def _write(self, batch: list[Outcome]) -> None:
        try:
            await self._adapters.record_outcomes([outcome.row() for outcome in batch])
        except Exception:
            logger.warning("could not record %d outcomes", len(batch), exc_info=True)

    async def drain(self) -> None:
        """Write everything recorded so far now (shutdown, tests)."""
        while self._flusher is not None and not self._flusher.done():
            self._flush_now.set()
            await asyncio.gather(self._flusher, return_exceptions=True)
