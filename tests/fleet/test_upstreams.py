"""UpstreamPool: round-robin, connect-failure failover, bounded timeouts."""

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
from registry.fleet.upstreams import UpstreamPool, UpstreamUnavailable
from tests.openai.live import ServedApp


def _replica(name: str, delay_s: float = 0.0) -> Starlette:
    async def who(request: Request) -> Response:
        await asyncio.sleep(delay_s)
        return PlainTextResponse(name)

    return Starlette(routes=[Route("/who", who)])


@pytest.fixture
def two_replicas() -> Iterator[list[ServedApp]]:
    served = [ServedApp(_replica("a")).start(), ServedApp(_replica("b")).start()]
    yield served
    for replica in served:
        replica.stop()


async def test_round_robin(two_replicas: list[ServedApp]) -> None:
    pool = UpstreamPool([r.url for r in two_replicas], request_timeout_s=5)
    answers = [(await pool.send("GET", "/who")).text for _ in range(4)]
    await pool.aclose()
    assert answers == ["a", "b", "a", "b"]


async def test_fails_over_and_skips_a_replica_that_is_down(two_replicas: list[ServedApp]) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    pool = UpstreamPool([closed, two_replicas[0].url], request_timeout_s=5)
    answers = [(await pool.send("GET", "/who")).text for _ in range(3)]
    assert answers == ["a", "a", "a"]
    assert not pool.replicas[0].is_up(time.monotonic())  # marked down
    assert [r.url for r in pool.candidates()][-1] == closed  # tried last while down
    await pool.aclose()


async def test_all_down_is_unavailable() -> None:
    pool = UpstreamPool(
        [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"],
        request_timeout_s=5,
    )
    with pytest.raises(UpstreamUnavailable) as caught:
        await pool.send("GET", "/who")
    assert "no vLLM replica is reachable" in caught.value.message
    await pool.aclose()


async def test_slow_replica_times_out_as_unavailable() -> None:
    slow = ServedApp(_replica("slow", delay_s=5)).start()
    try:
        pool = UpstreamPool([slow.url], request_timeout_s=0.3)
        started = asyncio.get_running_loop().time()
        with pytest.raises(UpstreamUnavailable) as caught:
            await pool.send("GET", "/who")
        assert asyncio.get_running_loop().time() - started < 3
        assert "did not answer in time" in caught.value.message
        await pool.aclose()
    finally:
        slow.stop()


async def test_client_is_recreated_after_close(two_replicas: list[ServedApp]) -> None:
    pool = UpstreamPool([two_replicas[0].url], request_timeout_s=5)
    assert (await pool.send("GET", "/who")).text == "a"
    await pool.aclose()
    assert (await pool.send("GET", "/who")).text == "a"
    await pool.aclose()


def test_needs_a_replica() -> None:
    with pytest.raises(ValueError, match="at least one"):
        UpstreamPool([], request_timeout_s=1)


async def test_sends_the_api_key(two_replicas: list[ServedApp]) -> None:
    pool = UpstreamPool([two_replicas[0].url], request_timeout_s=5, api_key="s3cret")
    assert pool.client.headers["authorization"] == "Bearer s3cret"
    await pool.aclose()
