"""The vLLM replicas behind the control plane and the one HTTP client that talks to them.

:class:`UpstreamPool` sends to the replicas in the order :mod:`registry.fleet.routing` chose
(adapter affinity; round-robin among those not recently found down when no order is given),
fails over to the next one when a connection cannot be made (the request was not sent, so
retrying is safe), retries a non-streaming request once elsewhere when it failed after it was
sent but before its answer was read, counts each replica's outstanding requests, and turns every
transport failure into :class:`UpstreamUnavailable` within bounded timeouts. Answers come back as
:class:`UpstreamResponse`.

Two bounds, two answers: making a connection is bounded by ``connect_timeout_s`` (seconds: a
refused or unanswered connection fails over to the next replica, and when none is left the front
door answers 503); each socket read by ``read_timeout_s`` (long: a long generation may stream
slowly), and a replica that accepted a request but went silent for that long raises
:class:`UpstreamTimeout` (the front door answers 504).

The client is an ``aiohttp.ClientSession``, the control plane's only HTTP client library: it was
measured 0.4 ms faster per proxied request than httpx at the median (benchmarks/frontdoor/), a
large share of the front door's sub-millisecond budget. It is created on first use inside the
running event loop and closed by :meth:`UpstreamPool.aclose` (the composition root's shutdown).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy

logger = logging.getLogger(__name__)

#: How long a replica that refused a connection is skipped (unless all are down).
DOWN_FOR_S = 5.0
#: Default bound on making a connection (the connector has no limit, so there is no pool wait).
CONNECT_TIMEOUT_S = 3.0
#: Idle keep-alive connections are dropped before uvicorn's (vLLM's) own 5 s idle timeout, so a
#: request is not written onto a connection the server is closing.
KEEPALIVE_EXPIRY_S = 4.0

#: Transport failures; aiohttp's timeouts are ``TimeoutError`` subclasses, a total timeout is
#: a bare ``TimeoutError``.
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


class UpstreamUnavailable(Exception):
    """No vLLM replica could be reached, or it did not answer in time (``message`` says why)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UpstreamTimeout(UpstreamUnavailable):
    """A replica took the request (or its connection) but did not answer within the read
    timeout: vLLM is hung or overloaded. The request may have reached vLLM, so it is not
    retried elsewhere."""


class Replica:
    """One vLLM OpenAI server.

    ``down_until``: skipped until then after a refused connection. ``healthy``: the health
    monitor's last verdict (``None`` before its first check, or when no monitor runs), with
    ``health_reason`` saying why not. ``outstanding``: front-door requests sent to it whose
    answer has not been read or relayed to the end yet (the routing policies' load signal).
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.down_until = 0.0
        self.healthy: bool | None = None
        self.health_reason: str | None = None
        self.outstanding = 0

    def is_up(self, now: float) -> bool:
        return now >= self.down_until and self.healthy is not False

    def outstanding_now(self) -> float:
        """:attr:`outstanding`, for a gauge read at scrape time."""
        return float(self.outstanding)

    def __repr__(self) -> str:
        return f"Replica({self.url!r})"


class UpstreamResponse:
    """One answer of a replica: status, headers and (read at once, or streamed) body."""

    def __init__(
        self, replica: Replica, raw: aiohttp.ClientResponse, *, counted: bool = False
    ) -> None:
        self.replica = replica
        self._raw = raw
        self._content: bytes | None = None
        #: whether this answer counts in ``replica.outstanding`` until it is read or closed
        self._counted = counted

    def _release(self) -> None:
        if self._counted:
            self._counted = False
            self.replica.outstanding -= 1

    @property
    def status_code(self) -> int:
        return self._raw.status

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        return self._raw.headers

    @property
    def content(self) -> bytes:
        if self._content is None:
            raise RuntimeError("the response body has not been read (call aread())")
        return self._content

    @property
    def text(self) -> str:
        return self.content.decode(self._raw.charset or "utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)

    def failure(self) -> str:
        """``HTTP <status>: <vLLM's message>`` of an error answer (read), for logs and reports."""
        message = self.text.strip()
        try:
            body = self.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            error = body.get("error", body)
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                message = error["message"]
            elif isinstance(body.get("message"), str):
                message = body["message"]
        return (
            f"HTTP {self.status_code}: {message[:300]}" if message else f"HTTP {self.status_code}"
        )

    async def aread(self) -> bytes:
        """The whole body (read once); transport failures raise :class:`UpstreamUnavailable`."""
        if self._content is None:
            try:
                self._content = await self._raw.read()
            except TRANSPORT_ERRORS as exc:
                self._raw.close()
                raise _unavailable(self.replica, exc) from exc
            finally:
                self._release()
        return self._content

    async def aiter_raw(self) -> AsyncGenerator[bytes, None]:
        """The body's bytes as they arrive; a broken stream raises :class:`UpstreamUnavailable`."""
        try:
            async for chunk in self._raw.content.iter_any():
                yield chunk
        except TRANSPORT_ERRORS as exc:
            raise _unavailable(self.replica, exc) from exc

    async def aclose(self) -> None:
        """Give the connection back (or drop it when the body was not read to the end)."""
        self._release()
        if self._raw.content.is_eof():
            self._raw.release()
        else:
            self._raw.close()


class UpstreamPool:
    """The vLLM replicas and their one client: failover on connect failures, one retry.

    Which replica a front-door request tries first is :mod:`registry.fleet.routing`'s choice
    (``order``); without one, replicas are taken round-robin.
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        read_timeout_s: float,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        api_key: str | None = None,
        on_retry: Callable[[Replica], None] | None = None,
    ) -> None:
        """``on_retry``: called with the replica a sent request failed on before it is
        retried on another (:meth:`send` with ``retry=True``), for a metric."""
        if not urls:
            raise ValueError("at least one vLLM URL is needed")
        self.replicas = [Replica(url) for url in urls]
        self._cycle = itertools.cycle(range(len(self.replicas)))
        # connect: the TCP (and, for https, TLS) handshake; read: per socket read (time to the
        # first byte, then between chunks), so a slow stream lives while it keeps sending
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=connect_timeout_s,
            sock_connect=connect_timeout_s,
            sock_read=read_timeout_s,
        )
        # identity: streams are relayed byte for byte, so they must not arrive compressed
        self._headers = {"Accept-Encoding": "identity"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._client: aiohttp.ClientSession | None = None
        self._on_retry = on_retry

    @property
    def client(self) -> aiohttp.ClientSession:
        """The session (created on first use; needs a running event loop)."""
        if self._client is None or self._client.closed:
            self._client = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_EXPIRY_S),
                timeout=self._timeout,
                headers=self._headers,
                # a proxy must not carry one client's cookies into another's requests
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
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
        order: Sequence[Replica] | None = None,
        retry: bool = False,
    ) -> UpstreamResponse:
        """Send to the first replica of ``order`` (default: :meth:`candidates`) that accepts.

        A replica that refuses the connection (or does not accept it in time) is marked down
        for a few seconds and the next one is tried: the request was not sent. With
        ``retry=True`` (non-streaming requests only: nothing has reached the client before the
        whole answer is read) a request that was sent but failed before its answer was read
        (the connection broke, vLLM died) is sent once more, to the next replica; a read timeout
        is never retried (vLLM may still be working on it).

        With ``stream=True`` the body is not read: the caller must close the response.
        Raises :class:`UpstreamTimeout` when the replica that took the request went silent for
        the read timeout, :class:`UpstreamUnavailable` when no replica answers, and at once, without
        trying, when the health monitor found every replica down (a hung vLLM would otherwise
        hold each request until its read timeout); the monitor re-checks a down replica every
        few seconds, so serving resumes soon after vLLM is back.
        """
        if all(replica.healthy is False for replica in self.replicas):
            reasons = "; ".join(f"{r.url}: {r.health_reason}" for r in self.replicas)
            raise UpstreamUnavailable(f"no healthy vLLM replica ({reasons})")
        last_error: Exception | None = None
        retried = False
        client = self.client
        for replica in self.candidates() if order is None else order:
            replica.outstanding += 1
            try:
                raw = await client.request(
                    method, replica.url + path, data=content, headers=headers
                )
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
                replica.outstanding -= 1
                replica.down_until = time.monotonic() + DOWN_FOR_S
                logger.warning(
                    "vLLM replica %s unreachable: %s", replica.url, describe_failure(exc)
                )
                last_error = exc
                continue
            except TRANSPORT_ERRORS as exc:
                replica.outstanding -= 1
                failure = _unavailable(replica, exc)
                if not self._retry(retry and not retried, replica, failure):
                    raise failure from exc
                retried, last_error = True, failure
                continue
            response = UpstreamResponse(replica, raw, counted=True)
            if not stream:
                try:
                    await response.aread()
                except UpstreamUnavailable as failure:
                    if not self._retry(retry and not retried, replica, failure):
                        raise
                    retried, last_error = True, failure
                    continue
            return response
        if isinstance(last_error, UpstreamUnavailable):
            raise last_error
        raise UpstreamUnavailable(
            f"no vLLM replica is reachable ({describe_failure(last_error)})"
        ) from last_error

    def _retry(self, allowed: bool, replica: Replica, failure: UpstreamUnavailable) -> bool:
        """Whether a request that failed on ``replica`` after it was sent goes to the next one."""
        if not allowed or isinstance(failure, UpstreamTimeout):
            return False
        logger.warning("%s; retrying the request once on another replica", failure.message)
        if self._on_retry is not None:
            self._on_retry(replica)
        return True

    async def send_to(
        self,
        replica: Replica,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        timeout_s: float,
    ) -> UpstreamResponse:
        """One request to one replica (health checks, probes, warm-up), read in full.

        Bounded by ``timeout_s`` in all; raises :class:`UpstreamUnavailable` on any transport
        failure. Does not touch the replica's failover state.
        """
        try:
            raw = await self.client.request(
                method,
                replica.url + path,
                json=json_body,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            )
            response = UpstreamResponse(replica, raw)
            await response.aread()
        except TRANSPORT_ERRORS as exc:
            raise _unavailable(replica, exc) from exc
        return response

    async def broadcast(
        self, method: str, path: str, json_body: Any, *, timeout_s: float | None = None
    ) -> list[tuple[Replica, UpstreamResponse | Exception]]:
        """Send the same request to every replica concurrently; never raises transport errors.

        Responses come back read (and their connections released). ``timeout_s`` bounds each
        replica's request in all (default: the pool's connect and read timeouts).
        """
        client = self.client
        # (never timeout=None: aiohttp reads it as "no timeout at all")
        timeout = self._timeout if timeout_s is None else aiohttp.ClientTimeout(total=timeout_s)

        async def one(replica: Replica) -> tuple[Replica, UpstreamResponse | Exception]:
            try:
                raw = await client.request(
                    method, replica.url + path, json=json_body, timeout=timeout
                )
                response = UpstreamResponse(replica, raw)
                await response.aread()
            except (*TRANSPORT_ERRORS, UpstreamUnavailable) as exc:
                return replica, exc
            return replica, response

        return list(await asyncio.gather(*(one(r) for r in self.replicas)))


def _unavailable(replica: Replica, exc: BaseException) -> UpstreamUnavailable:
    if isinstance(exc, asyncio.TimeoutError):
        return UpstreamTimeout(
            f"vLLM at {replica.url} did not answer in time ({describe_failure(exc)})"
        )
    return UpstreamUnavailable(f"vLLM at {replica.url} failed: {describe_failure(exc)}")


#: aiohttp's exception types under the names the messages have always used (``ConnectError``).
_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (aiohttp.ConnectionTimeoutError, "ConnectTimeout"),
    (aiohttp.SocketTimeoutError, "ReadTimeout"),
    (aiohttp.ClientConnectorError, "ConnectError"),
)


def describe_failure(exc: BaseException | None) -> str:
    """``Kind: detail`` of a transport failure, e.g. ``ConnectError: Cannot connect to host …``."""
    if exc is None:
        return "no replica tried"
    kind = next((name for cls, name in _KINDS if isinstance(exc, cls)), type(exc).__name__)
    text = str(exc)
    return f"{kind}: {text}" if text else kind
