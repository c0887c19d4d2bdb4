"""The vLLM replicas behind the front door and the one HTTP client that talks to them.

:class:`UpstreamPool` picks a replica round-robin among those not recently found down, fails over
to the next one when a connection cannot be made (the request was not sent, so retrying is safe),
and turns every transport failure into :class:`UpstreamUnavailable` (503) within bounded
timeouts. The ``httpx.AsyncClient`` is created on first use and closed by :meth:`aclose` (the
app's lifespan calls it on shutdown).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from registry.openai.errors import UpstreamUnavailable

logger = logging.getLogger(__name__)

#: How long a replica that refused a connection is skipped (unless all are down).
DOWN_FOR_S = 5.0
CONNECT_TIMEOUT_S = 5.0
POOL_TIMEOUT_S = 10.0


class Replica:
    """One vLLM OpenAI server."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.down_until = 0.0

    def is_up(self, now: float) -> bool:
        return now >= self.down_until

    def __repr__(self) -> str:
        return f"Replica({self.url!r})"


class UpstreamPool:
    """Round-robin over vLLM replicas with connect-failure failover."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        request_timeout_s: float,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not urls:
            raise ValueError("at least one vLLM URL is needed")
        self.replicas = [Replica(url) for url in urls]
        self._cycle = itertools.cycle(range(len(self.replicas)))
        self._timeout = httpx.Timeout(
            request_timeout_s,
            connect=min(CONNECT_TIMEOUT_S, request_timeout_s),
            pool=min(POOL_TIMEOUT_S, request_timeout_s),
        )
        # identity: streams are relayed byte for byte, so they must not arrive compressed
        self._headers = {"Accept-Encoding": "identity"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None or self._client.is_closed:
            self._client = httpx.AsyncClient(
                timeout=self._timeout,
                headers=self._headers,
                transport=self._transport,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def candidates(self) -> list[Replica]:
        """Replicas in the order to try them: round-robin start, healthy ones first."""
        start = next(self._cycle)
        ordered = self.replicas[start:] + self.replicas[:start]
        now = time.monotonic()
        return [r for r in ordered if r.is_up(now)] + [r for r in ordered if not r.is_up(now)]

    async def send(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        stream: bool = False,
    ) -> httpx.Response:
        """Send to the first replica that accepts a connection.

        With ``stream=True`` the body is not read: the caller must close the response.
        Raises :class:`UpstreamUnavailable` when no replica answers.
        """
        last_error: Exception | None = None
        for replica in self.candidates():
            request = self.client.build_request(
                method, replica.url + path, content=content, headers=headers
            )
            try:
                return await self.client.send(request, stream=stream)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                replica.down_until = time.monotonic() + DOWN_FOR_S
                logger.warning("vLLM replica %s unreachable: %s", replica.url, _describe(exc))
                last_error = exc
            except httpx.TimeoutException as exc:
                raise UpstreamUnavailable(
                    f"vLLM at {replica.url} did not answer in time ({_describe(exc)})"
                ) from exc
            except httpx.TransportError as exc:
                raise UpstreamUnavailable(
                    f"vLLM at {replica.url} failed: {_describe(exc)}"
                ) from exc
        raise UpstreamUnavailable(
            f"no vLLM replica is reachable ({_describe(last_error)})"
        ) from last_error

    async def broadcast(
        self, method: str, path: str, json_body: Any
    ) -> list[tuple[Replica, httpx.Response | Exception]]:
        """Send the same request to every replica concurrently; never raises transport errors."""

        async def one(replica: Replica) -> tuple[Replica, httpx.Response | Exception]:
            try:
                response = await self.client.request(method, replica.url + path, json=json_body)
            except httpx.HTTPError as exc:
                return replica, exc
            return replica, response

        return list(await asyncio.gather(*(one(r) for r in self.replicas)))


def _describe(exc: Exception | None) -> str:
    if exc is None:
        return "no replica tried"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
