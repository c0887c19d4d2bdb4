"""Per-request outcomes (latency, success), recorded off the request's path.

The front door calls :meth:`OutcomeRecorder.record` once a response has been sent (or a stream
has ended); the registry's ``record_outcome`` then runs in a background task so that a slow or
failing statistics write never delays or breaks a request. This is also where request metrics
(Prometheus) plug in: :class:`OutcomeRecorder` receives every finished request.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from registry.openai.routing import Target
from registry.services.adapters import AdapterService

logger = logging.getLogger(__name__)

#: Outcomes still being written beyond this are dropped (with a warning) rather than queued.
MAX_PENDING = 1024


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


class OutcomeRecorder:
    """Hands finished requests to the registry's statistics without awaiting them."""

    def __init__(self, adapters: AdapterService, max_pending: int = MAX_PENDING) -> None:
        self._adapters = adapters
        self._max_pending = max_pending
        self._pending: set[asyncio.Task[None]] = set()
        self._dropped = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def record(self, outcome: Outcome) -> None:
        if not outcome.target.is_adapter:
            return
        if len(self._pending) >= self._max_pending:
            self._dropped += 1
            if self._dropped in (1, 100) or self._dropped % 10_000 == 0:
                logger.warning("outcome backlog full: %d outcomes dropped", self._dropped)
            return
        task = asyncio.get_running_loop().create_task(self._write(outcome))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write(self, outcome: Outcome) -> None:
        try:
            await self._adapters.record_outcome(
                outcome.target.served_name, outcome.latency_ms, outcome.ok
            )
        except Exception:
            logger.warning(
                "could not record the outcome of %s", outcome.target.served_name, exc_info=True
            )

    async def drain(self) -> None:
        """Wait for the outcomes being written (shutdown, tests)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
