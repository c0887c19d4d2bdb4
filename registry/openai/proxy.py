"""Forwarding of completion requests to vLLM.

The body is forwarded untouched except for ``model``, which becomes the served (versioned) name;
when the client already named that, the original bytes go out as they came. Non-streaming answers
pass through as vLLM wrote them (vLLM echoes the ``model`` it received, i.e. the served name);
streams (``"stream": true``) are relayed chunk by chunk as they arrive, and the upstream stream is
closed as soon as the client goes away.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from registry.fleet.upstreams import UpstreamPool, UpstreamResponse, UpstreamUnavailable
from registry.openai.catalog import models_list
from registry.openai.errors import (
    InvalidRequest,
    OpenAIError,
    ServiceUnavailable,
    error_payload,
    error_response,
    normalise_upstream_error,
)
from registry.openai.outcomes import Outcome, OutcomeRecorder
from registry.openai.targets import ModelRouter, Target
from registry.services.adapters import AdapterService

logger = logging.getLogger(__name__)

#: Request headers passed on to vLLM besides the body's content type.
FORWARDED_HEADERS = ("x-request-id", "traceparent", "tracestate")
#: Response headers passed back from vLLM.
RETURNED_HEADERS = ("x-request-id",)


class Endpoint:
    """One OpenAI endpoint: its path and the field the body must carry besides ``model``."""

    def __init__(self, path: str, required: str, required_type: type | tuple[type, ...]) -> None:
        self.path = path
        self.required = required
        self.required_type = required_type


CHAT_COMPLETIONS = Endpoint("/v1/chat/completions", "messages", list)
COMPLETIONS = Endpoint("/v1/completions", "prompt", (str, list))


def parse_body(raw: bytes, endpoint: Endpoint) -> dict[str, Any]:
    """The JSON request body; raises :class:`InvalidRequest` if it is unusable."""
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequest("'model' is required and must be a non-empty string", param="model")
    if endpoint.required not in body:
        raise InvalidRequest(f"'{endpoint.required}' is required", param=endpoint.required)
    if not isinstance(body[endpoint.required], endpoint.required_type):
        raise InvalidRequest(f"'{endpoint.required}' has the wrong type", param=endpoint.required)
    return body


class FrontDoor:
    """Routes a completion request to its served model and relays vLLM's answer."""

    def __init__(
        self,
        adapters: AdapterService,
        router: ModelRouter,
        upstream: UpstreamPool,
        outcomes: OutcomeRecorder,
    ) -> None:
        self.adapters = adapters
        self.router = router
        self.upstream = upstream
        self.outcomes = outcomes

    async def models(self) -> dict[str, Any]:
        """``GET /v1/models``: the base model(s), every adapter and every ``name@version``."""
        adapters = await self.adapters.list_adapters()
        bases = sorted(self.router.base_names) or sorted(await self.router.refresh_base_names())
        return models_list(bases, adapters)

    async def handle(self, request: Request, endpoint: Endpoint) -> Response:
        started = time.perf_counter()
        raw = await request.body()
        body = parse_body(raw, endpoint)
        target = await self.router.route(body["model"])
        if target.served_name != body["model"]:
            body["model"] = target.served_name
            raw = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        headers = {"content-type": "application/json"}
        for name in FORWARDED_HEADERS:
            value = request.headers.get(name)
            if value is not None:
                headers[name] = value
        stream = body.get("stream") is True
        upstream = await self.upstream.send(
            "POST", endpoint.path, content=raw, headers=headers, stream=stream
        )

        def finish(status: int) -> None:
            latency_ms = (time.perf_counter() - started) * 1000.0
            self.outcomes.record(Outcome(target, endpoint.path, status, latency_ms, stream))

        if not stream:
            return self._relay_whole(upstream, target, finish)
        if upstream.status_code != 200:
            try:
                await upstream.aread()
            finally:
                await upstream.aclose()
            return self._relay_whole(upstream, target, finish)
        return RelayedStream(upstream, target, finish)

    @staticmethod
    def _relay_whole(
        upstream: UpstreamResponse, target: Target, finish: Callable[[int], None]
    ) -> Response:
        headers = target.headers()
        headers.update(_returned_headers(upstream.headers))
        finish(upstream.status_code)
        if upstream.status_code >= 400:
            return JSONResponse(
                normalise_upstream_error(upstream.status_code, upstream.content),
                status_code=upstream.status_code,
                headers=headers,
            )
        return Response(
            upstream.content,
            status_code=upstream.status_code,
            headers=headers,
            media_type=upstream.headers.get("content-type", "application/json"),
        )


class RelayedStream(StreamingResponse):
    """Server-sent events relayed from vLLM; the upstream is closed however the relay ends."""

    def __init__(
        self, upstream: UpstreamResponse, target: Target, finish: Callable[[int], None]
    ) -> None:
        self._upstream = upstream
        self._finish = finish
        self._completed = False
        headers = target.headers()
        headers.update(_returned_headers(upstream.headers))
        headers["cache-control"] = "no-cache"
        headers["x-accel-buffering"] = "no"
        super().__init__(
            self._chunks(),
            status_code=upstream.status_code,
            headers=headers,
            media_type=upstream.headers.get("content-type", "text/event-stream"),
        )

    async def _chunks(self) -> AsyncIterator[bytes]:
        try:
            async with aclosing(self._upstream.aiter_raw()) as chunks:
                async for chunk in chunks:
                    yield chunk
        except UpstreamUnavailable as exc:
            logger.warning("vLLM stream broke off: %s", exc.message)
            error = error_payload("upstream stream interrupted", "server_error", None, 503)
            yield f"data: {json.dumps(error)}\n\n".encode()
            self._finish(503)
            self._completed = True
            return
        self._completed = True
        self._finish(self._upstream.status_code)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._upstream.aclose()
            if not self._completed:
                logger.info("client left a stream early; closed the upstream stream")


def _returned_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: headers[name] for name in RETURNED_HEADERS if name in headers}


async def guarded(handler: Callable[[], Awaitable[Response]]) -> Response:
    """Run ``handler``; any error becomes an OpenAI-style answer, never a stack trace.

    The front door's one error handler: its endpoints answer OpenAI's error shape, not the admin
    API's ``application/problem+json``.
    """
    try:
        response = await handler()
    except OpenAIError as exc:
        return error_response(exc)
    except UpstreamUnavailable as exc:
        return error_response(ServiceUnavailable(exc.message))
    except Exception:
        logger.exception("front door failed")
        return JSONResponse(
            error_payload("internal error in the control plane", "server_error", None, 500),
            status_code=500,
        )
    return response
