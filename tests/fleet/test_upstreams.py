"""UpstreamPool: round-robin, connect-failure failover, one retry after a broken answer, outstanding
requests, bounded connect and read timeouts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from hi_moe_lora.app.processes import free_port
from registry.fleet.upstreams import UpstreamPool, UpstreamTimeout, UpstreamUnavailable
from tests.openai.live import ServedApp
from tests.support.sockets import hanging_up_listener, silent_listener, unanswered_connects


def _replica(name: str, delay_s: float = 0.0) -> Starlette:
    async def who(request: Request) -> Response:
        await asyncio.sleep(delay_s)
        return PlainTextResponse(name)

    return Starlette(routes=[Route("/who", who, methods=["GET", "POST"])])


@pytest.fixture
def two_replicas() -> Iterator[list[ServedApp]]:
    served = [ServedApp(_replica("a")).start(), ServedApp(_replica("b")).start()]
    yield served
    for replica in served:
        replica.stop()


async def test_round_robin(two_replicas: list[ServedApp]) -> None:
    pool = UpstreamPool([r.url for r in two_replicas], read_timeout_s=5)
    answers = [(await pool.send("GET", "/who")).text for _ in range(4)]
    await pool.aclose()
    assert answers == ["a", "b", "a", "b"]


async def test_fails_over_and_skips_a_replica_that_is_down(two_replicas: list[ServedApp]) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    pool = UpstreamPool([closed, two_replicas[0].url], read_timeout_s=5)
    answers = [(await pool.send("GET", "/who")).text for _ in range(3)]
    assert answers == ["a", "a", "a"]
    assert not pool.replicas[0].is_up(time.monotonic())  # marked down
    assert [r.url for r in pool.candidates()][-1] == closed  # tried last while down
    await pool.aclose()


async def test_all_down_is_unavailable() -> None:
    pool = UpstreamPool(
        [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"],
        read_timeout_s=5,
    )
    with pytest.raises(UpstreamUnavailable) as caught:
        await pool.send("GET", "/who")
    assert "no vLLM replica is reachable" in caught.value.message
    await pool.aclose()


async def test_slow_replica_times_out_as_unavailable() -> None:
    # stopped without waiting out the 5 s answer the pool gave up on
    slow = ServedApp(_replica("slow", delay_s=5), graceful_shutdown_s=0).start()
    try:
        pool = UpstreamPool([slow.url], read_timeout_s=0.3)
        started = asyncio.get_running_loop().time()
        with pytest.raises(UpstreamTimeout) as caught:
            await pool.send("GET", "/who")
        assert asyncio.get_running_loop().time() - started < 3
        assert "did not answer in time" in caught.value.message
        await pool.aclose()
    finally:
        slow.stop()


async def test_a_silent_replica_is_a_timeout_after_the_read_bound() -> None:
    with silent_listener() as url:
        pool = UpstreamPool([url], read_timeout_s=0.5, connect_timeout_s=5)
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout) as caught:
            await pool.send("POST", "/v1/completions", content=b"{}")
        elapsed = time.monotonic() - started
        await pool.aclose()
    assert 0.4 < elapsed < 2.5
    assert "ReadTimeout" in caught.value.message


async def test_a_connect_that_hangs_is_bounded_by_the_connect_timeout() -> None:
    with unanswered_connects() as url:
        pool = UpstreamPool([url], read_timeout_s=600, connect_timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(UpstreamUnavailable) as caught:
            await pool.send("GET", "/who")
        elapsed = time.monotonic() - started
        await pool.aclose()
    assert not isinstance(caught.value, UpstreamTimeout)  # never reached vLLM: 503, not 504
    assert 0.4 < elapsed < 2.5
    assert "ConnectTimeout" in caught.value.message


async def test_a_hanging_connect_fails_over_to_the_next_replica(
    two_replicas: list[ServedApp],
) -> None:
    with unanswered_connects() as url:
        pool = UpstreamPool([url, two_replicas[0].url], read_timeout_s=600, connect_timeout_s=0.3)
        started = time.monotonic()
        assert (await pool.send("GET", "/who")).text == "a"
        assert time.monotonic() - started < 2
        assert not pool.replicas[0].is_up(time.monotonic())
        await pool.aclose()


async def test_broadcast_bounds_each_replica(two_replicas: list[ServedApp]) -> None:
    with silent_listener() as silent:
        pool = UpstreamPool([two_replicas[0].url, silent], read_timeout_s=600)
        started = time.monotonic()
        results = await pool.broadcast("GET", "/who", None, timeout_s=0.5)
        elapsed = time.monotonic() - started
        await pool.aclose()
    assert elapsed < 2.5
    first, second = (result for _, result in results)
    assert not isinstance(first, Exception)
    assert first.text == "a"
    assert isinstance(second, TimeoutError)


async def test_client_is_recreated_after_close(two_replicas: list[ServedApp]) -> None:
    pool = UpstreamPool([two_replicas[0].url], read_timeout_s=5)
    assert (await pool.send("GET", "/who")).text == "a"
    await pool.aclose()
    assert (await pool.send("GET", "/who")).text == "a"
    await pool.aclose()


def test_needs_a_replica() -> None:
    with pytest.raises(ValueError, match="at least one"):
        UpstreamPool([], read_timeout_s=1)


async def test_sends_the_api_key(two_replicas: list[ServedApp]) -> None:
    pool = UpstreamPool([two_replicas[0].url], read_timeout_s=5, api_key="s3cret")
    assert pool.client.headers["authorization"] == "Bearer s3cret"
    await pool.aclose()


async def test_a_sent_request_that_broke_is_retried_once_on_another_replica(
    two_replicas: list[ServedApp],
) -> None:
    failed_on: list[str] = []
    with hanging_up_listener() as (dying, taken):
        pool = UpstreamPool(
            [dying, two_replicas[0].url],
            read_timeout_s=5,
            on_retry=lambda replica: failed_on.append(replica.url),
        )
        answer = await pool.send("POST", "/who", order=pool.replicas, retry=True)
        assert answer.text == "a"
        assert failed_on == [dying]
        assert len(taken) == 1  # it did reach the dying replica first (POST: aiohttp's own
        # retry of idempotent methods on a dropped connection does not apply)
        # without retry (a stream), the failure is the answer
        with pytest.raises(UpstreamUnavailable, match="failed"):
            await pool.send("POST", "/who", order=pool.replicas, retry=False)
        await pool.aclose()
    assert all(r.outstanding == 0 for r in pool.replicas)


async def test_the_retry_happens_once_only() -> None:
    with (
        hanging_up_listener() as (first, _),
        hanging_up_listener() as (second, _),
        hanging_up_listener() as (third, taken_third),
    ):
        pool = UpstreamPool([first, second, third], read_timeout_s=5)
        with pytest.raises(UpstreamUnavailable, match="failed"):
            await pool.send("POST", "/who", order=pool.replicas, retry=True)
        await pool.aclose()
        assert taken_third == []  # two attempts in all, never a third


async def test_outstanding_counts_answers_not_yet_finished(two_replicas: list[ServedApp]) -> None:
    pool = UpstreamPool([two_replicas[0].url], read_timeout_s=5)
    replica = pool.replicas[0]
    streamed = await pool.send("GET", "/who", stream=True)
    assert replica.outstanding == 1
    read = await pool.send("GET", "/who")
    assert read.text == "a"
    assert replica.outstanding == 1  # a read answer is finished
    await streamed.aclose()
    await streamed.aclose()  # twice: counted once
    assert replica.outstanding == 0
    await pool.aclose()
