"""Writes off the request path: buffered, batched, bounded, drained, never raising; kept and
retried with backoff while the database is unavailable."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from registry.background import BatchWriter
from registry.errors import DatabaseUnavailable


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


class Outage:
    """A sink whose database is down until ``up`` is set."""

    def __init__(self) -> None:
        self.up = False
        self.attempts = 0
        self.batches: list[list[int]] = []

    async def write(self, batch: Sequence[int]) -> None:
        self.attempts += 1
        if not self.up:
            raise DatabaseUnavailable("the registry's database is unavailable (test)")
        self.batches.append(list(batch))


async def test_an_outage_keeps_the_items_and_writes_them_in_order_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = Outage()
    writer = BatchWriter("number", sink.write, flush_interval_s=0.01, max_backoff_s=0.05)
    writer.add(1)
    writer.add(2)
    await asyncio.sleep(0.2)
    assert sink.attempts >= 2  # retried
    assert writer.failing
    writer.add(3)  # arrives during the outage: behind the kept ones
    assert writer.pending == 3
    assert writer.dropped == 0
    assert writer.lag_s() >= 0.2
    warnings = [r.getMessage() for r in caplog.records if "could not write" in r.getMessage()]
    assert len(warnings) == 1  # once per outage, not per attempt
    sink.up = True
    await asyncio.sleep(0.2)
    assert [item for batch in sink.batches for item in batch] == [1, 2, 3]
    assert writer.pending == 0
    assert not writer.failing
    assert any(
        "after" in r.getMessage() and "failed attempts" in r.getMessage() for r in caplog.records
    )


async def test_retries_back_off_exponentially_up_to_the_bound() -> None:
    sink = Outage()
    writer = BatchWriter("number", sink.write, flush_interval_s=0.02, max_backoff_s=0.16)
    writer.add(1)
    await asyncio.sleep(1.0)
    # 0.02 then 0.04, 0.08, 0.16, 0.16, ... : about 8 attempts in a second, not 50
    assert 4 <= sink.attempts <= 10
    sink.up = True
    await writer.drain()
    assert sink.batches == [[1]]


async def test_the_backlog_stays_bounded_during_an_outage_and_counts_drops() -> None:
    sink = Outage()
    writer = BatchWriter("number", sink.write, max_pending=3, flush_interval_s=0.01)
    for item in range(5):
        writer.add(item)
    await asyncio.sleep(0.1)
    assert writer.pending == 3
    assert writer.dropped == 2
    sink.up = True
    await writer.drain()
    assert sink.batches == [[0, 1, 2]]


async def test_drain_during_an_outage_tries_once_and_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = Outage()
    writer = BatchWriter("number", sink.write, flush_interval_s=60, max_backoff_s=60)
    writer.add(1)
    await asyncio.wait_for(writer.drain(), timeout=5)
    assert sink.attempts == 1
    assert writer.pending == 1  # kept for the next attempt
    assert any("1 number records still unwritten" in r.getMessage() for r in caplog.records)
    writer.add(2)
    sink.up = True
    await asyncio.wait_for(writer.drain(), timeout=5)  # not waiting out the 60 s backoff
    assert sink.batches == [[1, 2]]


async def test_a_write_that_fails_for_another_reason_is_dropped_and_counted() -> None:
    writer = BatchWriter("number", Sink(fail=True).write, flush_interval_s=60)
    writer.add(1)
    writer.add(2)
    await writer.drain()
    assert writer.pending == 0
    assert writer.dropped == 2
