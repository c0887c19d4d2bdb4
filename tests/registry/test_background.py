"""Writes off the request path: buffered, batched, bounded, drained, never raising."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from registry.background import BatchWriter


class Sink:
    def __init__(self, fail: bool = False, delay_s: float = 0.0) -> None:
        self.batches: list[list[int]] = []
        self.fail = fail
        self.delay_s = delay_s

    async def write(self, batch: Sequence[int]) -> None:
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("database down")
        self.batches.append(list(batch))


async def test_items_are_written_in_one_batch_per_flush() -> None:
    sink = Sink()
    writer = BatchWriter("number", sink.write, flush_interval_s=60)
    for item in range(5):
        writer.add(item)
    assert writer.pending == 5
    assert sink.batches == []  # nothing written on the caller's path
    await writer.drain()
    assert sink.batches == [[0, 1, 2, 3, 4]]
    assert writer.pending == 0


async def test_the_backlog_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    sink = Sink()
    writer = BatchWriter("number", sink.write, max_pending=3, flush_interval_s=60)
    for item in range(10):
        writer.add(item)
    await writer.drain()
    assert sink.batches == [[0, 1, 2]]
    assert any("number backlog full: 1 dropped" in r.getMessage() for r in caplog.records)


async def test_a_failing_write_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    writer = BatchWriter("number", Sink(fail=True).write, flush_interval_s=60)
    writer.add(1)
    await writer.drain()
    assert writer.pending == 0
    assert any("could not write 1 number records" in r.getMessage() for r in caplog.records)


async def test_items_added_while_writing_go_in_the_next_batch() -> None:
    sink = Sink(delay_s=0.5)
    writer = BatchWriter("number", sink.write, flush_interval_s=0.01)
    writer.add(1)
    await asyncio.sleep(0.25)  # the first flush is writing now (for 0.5 s)
    writer.add(2)
    await writer.drain()
    assert sink.batches == [[1], [2]]


async def test_lag_is_the_age_of_the_oldest_unwritten_item_and_drops_are_counted() -> None:
    sink = Sink(delay_s=0.2)
    writer = BatchWriter("number", sink.write, max_pending=2, flush_interval_s=0.05)
    assert writer.lag_s() == 0.0
    writer.add(1)
    await asyncio.sleep(0.1)  # the flush has taken the batch and is writing it
    writer.add(2)
    writer.add(3)  # over the bound: dropped
    assert writer.dropped == 1
    lag = writer.lag_s()
    assert lag >= 0.1  # the item being written is the oldest
    await writer.drain()
    assert writer.lag_s() == 0.0
    assert writer.what == "number"
