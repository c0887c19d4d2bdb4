"""Waits with a time limit that never swallow a cancellation.

Python 3.11's ``asyncio.wait_for`` returns the inner result when a cancellation reaches it in
the same loop turn as the inner awaitable finishes (CPython gh-86296, fixed in 3.12 by a
rewrite). A background loop whose stop cancelled it there went on looping, and ``stop()``
waited for it forever: the change feed's ping and the health monitor's and the batch writer's
waits for their wake-up events all ran that race. :func:`wait_event` and :func:`within` wait
through ``asyncio.wait`` instead, which never holds back the caller's cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set, at most ``timeout_s`` seconds; whether it is set."""
    if not event.is_set():
        with contextlib.suppress(TimeoutError):
            await within(event.wait(), timeout_s)
    return event.is_set()


async def within(awaitable: Awaitable[T], timeout_s: float) -> T:
    """The result of ``awaitable``, which must finish within ``timeout_s`` seconds, else it is
    cancelled (and waited for) and :class:`TimeoutError` raised.

    A cancellation of the caller always propagates, once the awaitable is cancelled and has
    finished, so nothing it holds (a connection's lock) outlives the caller's wait.
    """
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(timeout_s, 0.0))
    except BaseException:
        await _cancelled(task)
        raise
    if not done:
        await _cancelled(task)
        raise TimeoutError(f"not done within {timeout_s:g} s")
    return task.result()


async def _cancelled(task: asyncio.Future[T]) -> None:
    """Cancel ``task`` and wait until it has finished (whatever it ends with)."""
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()  # retrieved: never "exception was never retrieved" in the log
