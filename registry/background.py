"""Writes off the request path: a bounded buffer flushed by one background task.

The front door hands finished requests (and the dispatcher its routing gaps) to a
:class:`BatchWriter`, which only appends to a buffer; a background task writes the buffer every
``flush_interval_s`` (or at once on :meth:`BatchWriter.drain`), so a slow or failing database
never delays or breaks a request, and each flush is one call (one transaction) instead of one
write per request.

What was added is not lost to a database outage: a batch whose write fails with a transient
error (``retry_on``, by default :class:`registry.errors.DatabaseUnavailable`) goes back to the
front of the buffer and is written again with exponential backoff (``flush_interval_s``
doubling up to ``max_backoff_s``), together with what arrived meanwhile, once the database is
back. The buffer holds at most ``max_pending`` items; past that, new items are dropped and
counted (:attr:`BatchWriter.dropped`, exported as a metric). A batch that fails for any other
reason (a bug, data the database refuses) would fail again: it is logged and dropped (counted).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from registry.errors import DatabaseUnavailable
from registry.waiting import wait_event

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_PENDING = 10_000
FLUSH_INTERVAL_S = 0.5
MAX_BACKOFF_S = 5.0


class BatchWriter(Generic[T]):
    """Buffers items of one kind (``what``, for logs) and writes them with ``write(batch)``."""

    def __init__(
        self,
        what: str,
        write: Callable[[Sequence[T]], Awaitable[None]],
        *,
        max_pending: int = MAX_PENDING,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        max_backoff_s: float = MAX_BACKOFF_S,
        retry_on: tuple[type[Exception], ...] = (DatabaseUnavailable,),
    ) -> None:
        self._what = what
        self._write = write
        self._max_pending = max_pending
        self._flush_interval_s = flush_interval_s
        self._max_backoff_s = max(max_backoff_s, flush_interval_s)
        self._retry_on = retry_on
        self._buffer: list[T] = []
        self._writing = 0
        self._flusher: asyncio.Task[None] | None = None
        self._flush_now = asyncio.Event()
        self._progress = asyncio.Condition()
        self._dropped = 0
        self._failures = 0  # consecutive transient failures (0: writing normally)
        self._attempts_started = 0
        self._attempts_finished = 0
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
        """Items lost since start: refused because the backlog was full, or whose write failed
        for a reason other than an unavailable database."""
        return self._dropped

    @property
    def failing(self) -> bool:
        """Whether the last write failed transiently (its items are kept and retried)."""
        return self._failures > 0

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

    def _delay_s(self) -> float:
        if self._failures == 0:
            return self._flush_interval_s
        return min(self._max_backoff_s, self._flush_interval_s * 2.0**self._failures)

    async def _flush_loop(self) -> None:
        while self._buffer:
            await wait_event(self._flush_now, self._delay_s())
            self._flush_now.clear()
            self._attempts_started += 1
            try:
                await self._write_buffer()
            finally:
                self._attempts_finished += 1
                async with self._progress:
                    self._progress.notify_all()

    async def _write_buffer(self) -> None:
        batch, self._buffer = self._buffer, []
        self._writing = len(batch)
        self._writing_since, self._buffer_since = self._buffer_since, None
        try:
            await self._write(batch)
        except self._retry_on as exc:
            self._failures += 1
            # back to the front, before what arrived meanwhile (add() kept the total bounded)
            self._buffer = batch + self._buffer
            self._buffer_since = self._writing_since
            if self._failures == 1:
                logger.warning(
                    "could not write %d %s records (%s); keeping them, retrying with backoff",
                    len(batch),
                    self._what,
                    exc,
                )
        except Exception:
            self._dropped += len(batch)
            logger.warning(
                "could not write %d %s records; dropped", len(batch), self._what, exc_info=True
            )
        else:
            if self._failures:
                logger.warning(
                    "wrote %d buffered %s records after %d failed attempts",
                    len(batch),
                    self._what,
                    self._failures,
                )
            self._failures = 0
        finally:
            self._writing = 0
            self._writing_since = None

    async def drain(self) -> None:
        """Write everything added so far, now (shutdown; before reading what was written).

        Waits for one write attempt that includes every item added before the call. If that
        attempt fails transiently the items stay buffered (retried in the background) and this
        returns anyway, with a warning of how many are still pending: it never waits for the
        database to come back.
        """
        if self.pending == 0:
            return
        goal = self._attempts_started + 1
        async with self._progress:
            while (
                self._attempts_finished < goal
                and self._flusher is not None
                and not self._flusher.done()
            ):
                self._flush_now.set()
                await self._progress.wait()
        if self.pending:
            logger.warning("%d %s records still unwritten (will retry)", self.pending, self._what)
