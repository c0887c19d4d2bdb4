"""registry/waiting.py: time-limited waits that never swallow a cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable

import pytest

from registry.waiting import wait_event, within

Wait = Callable[[asyncio.Event], Awaitable[object]]


async def _stops_on_first_cancel(wait: Wait, turns: int) -> bool:
    """A loop waiting on an event is cancelled ``turns`` loop turns after the event was set:
    whether that one cancellation ended it (else it went on waiting)."""
    event = asyncio.Event()

    async def background_loop() -> None:
        while True:
            await wait(event)
            event.clear()

    task = asyncio.get_running_loop().create_task(background_loop())
    await asyncio.sleep(0)
    event.set()
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=0.5)
    if not done:
        task.cancel()
        await asyncio.wait({task})
    return bool(done) and task.cancelled()


async def _wait_for_event(event: asyncio.Event) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(event.wait(), 10.0)


async def _wait_event(event: asyncio.Event) -> None:
    await wait_event(event, 10.0)


@pytest.mark.parametrize("turns", range(8))
async def test_a_cancellation_as_the_event_is_set_stops_the_loop(turns: int) -> None:
    assert await _stops_on_first_cancel(_wait_event, turns)


async def test_the_race_is_real_for_asyncio_wait_for_on_this_python() -> None:
    """The reason for the module: on Python < 3.12 some turn loses the cancellation."""
    stopped = [await _stops_on_first_cancel(_wait_for_event, turns) for turns in range(8)]
    if sys.version_info < (3, 12):
        assert not all(stopped), stopped
    else:
        assert all(stopped), stopped


async def test_wait_event_says_whether_the_event_came() -> None:
    event = asyncio.Event()
    assert not await wait_event(event, 0.01)
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 5.0)
    assert await wait_event(event, 0.0)  # already set: no wait


async def test_within_returns_the_result_in_time() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert await within(answer(), 1.0) == 42


async def test_within_cancels_a_late_awaitable_and_raises_timeout() -> None:
    finished: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            finished.append("cancelled")
            raise

    with pytest.raises(TimeoutError, match=r"within 0\.01 s"):
        await within(slow(), 0.01)
    assert finished == ["cancelled"]  # already over when the timeout reached the caller


async def test_a_cancelled_caller_cancels_the_awaitable_first() -> None:
    finished: list[str] = []
    started = asyncio.Event()

    async def held() -> None:
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # cleaning up takes a moment (closing a connection)
            finished.append("cleaned up")
            raise

    async def caller() -> None:
        await within(held(), 10.0)

    task = asyncio.get_running_loop().create_task(caller())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == ["cleaned up"]


async def test_an_error_of_the_awaitable_reaches_the_caller() -> None:
    async def broken() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await within(broken(), 1.0)
