"""Writes off the request path: a bounded buffer flushed by one background task.

The front door hands finished requests (and the dispatcher its routing gaps) to a
:class:`BatchWriter`, which only appends to a buffer; a background task writes the buffer every
``flush_interval_s`` (or at once on :meth:`BatchWriter.drain`), so a slow or
failing database never delays or breaks a request, and each flush is one call (one transaction)
instead of one write per request. Past ``max_pending`` items, new ones are dropped with a
warning rather than queued without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_PENDING = 10_000
FLUSH_INTERVAL_S = 0.5


class BatchWriter(Generic[T]):
    """Buffers items of one kind (``what``, for logs) and writes them with ``write(batch)``."""

    def __init__(
        self,
        what: str,
        write: Callable[[Sequence[T]], Awaitable[None]],
        *,
        max_pending: int = MAX_PENDING,
        flush_interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        self._what = what
        self._write = write
        self._max_pending = max_pending
        self._flush_interval_s = flush_interval_s
        self._buffer: list[T] = []
        self._writing = 0
        self._flusher: asyncio.Task[None] | None = None
        self._flush_now = asyncio.Event()
        self._dropped = 0
        # monotonic time the oldest item of the buffer / of the batch being written was added
        self._buffer_since: float | None = None
        self._writing_since: float | None = None

    @property
    def what(self) -> str:
        """The kind of item written (``"request outcome"``), as logs and metrics name it."""
        return self._what

    @property
    def pending(self) -> int:
        """Items added but not yet written."""
        return len(self._buffer) + self._writing

    @property
    def dropped(self) -> int:
        """Items dropped because the backlog was full, since start."""
        return self._dropped

    def lag_s(self, now: float | None = None) -> float:
        """Age of the oldest item not yet written (0.0 when nothing is pending)."""
        times = [t for t in (self._writing_since, self._buffer_since) if t is not None]
        if not times:
            return 0.0
        return max(0.0, (time.monotonic() if now is None else now) - min(times))

    def add(self, item: T) -> None:
        """Queue ``item`` (never blocks, never raises); needs a running event loop."""
        if self.pending >= self._max_pending:
            self._dropped += 1
            if self._dropped in (1, 100) or self._dropped % 10_000 == 0:
                logger.warning("%s backlog full: %d dropped", self._what, self._dropped)
            return
        if not self._buffer:
            self._buffer_since = time.monotonic()
        self._buffer.append(item)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while self._buffer:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._flush_now.wait(), self._flush_interval_s)
            self._flush_now.clear()
            batch, self._buffer = self._buffer, []
            self._writing = len(batch)
            self._writing_since, self._buffer_since = self._buffer_since, None
            try:
                await self._write(batch)
            except Exception:
                logger.warning(
                    "could not write %d %s records", len(batch), self._what, exc_info=True
                )
            finally:
                self._writing = 0
                self._writing_since = None

    async def drain(self) -> None:
        """Write everything added so far, now (shutdown; before reading what was written)."""
        while self._flusher is not None and not self._flusher.done():
            self._flush_now.set()
            await asyncio.gather(self._flusher, return_exceptions=True)
