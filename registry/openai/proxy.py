"""Forwarding of completion requests to vLLM.

Each request goes to the replica :class:`registry.fleet.routing.ReplicaChooser` puts first (adapter
affinity by default), falling over to the next; a non-streaming request that broke after it was
sent is retried once on another replica.

The body is forwarded untouched except for ``model``, which becomes the served (versioned) name;
when the client already named that, the original bytes go out as they came. Non-streaming answers
pass through as vLLM wrote them (vLLM echoes the ``model`` it received, i.e. the served name);
streams (``"stream": true``) are relayed chunk by chunk as they arrive, and the upstream stream is
closed as soon as the client goes away.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from registry.dispatch import Decision, Task
from registry.errors import RegistryError
from registry.fleet.loaded import LoadedAdapters
from registry.fleet.quarantine import Quarantine
from registry.fleet.routing import ReplicaChooser
from registry.fleet.upstreams import (
    UpstreamPool,
    UpstreamResponse,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from registry.metrics.families import ControlPlaneMetrics
from registry.openai.accounting import CLIENT_CLOSED, RequestAccount, WarmFirstTokens
from registry.openai.auto import (
    AUTO,
    HINT_FIELD,
    decision_headers,
    dry_run_answer,
    objective_of,
    take_hints,
)
from registry.openai.bodies import (
    DispatchBatchIn,
    DispatchTaskIn,
    FeedbackIn,
    json_object,
    validated,
)
from registry.openai.catalog import models_list
from registry.openai.errors import (
    GatewayTimeout,
    InvalidRequest,
    OpenAIError,
    RegistryRefusal,
    ServiceUnavailable,
    error_payload,
    error_response,
    normalise_upstream_error,
)
from registry.openai.outcomes import Outcome, OutcomeRecorder
from registry.openai.targets import ModelRouter, Target
from registry.services.adapters import AdapterService
from registry.services.dispatching import DispatchService
from registry.services.requests import RequestLog

logger = logging.getLogger(__name__)

#: Request headers passed on to vLLM besides the body's content type.
FORWARDED_HEADERS = ("x-request-id", "traceparent", "tracestate")
_FORWARDED_RAW = frozenset(name.encode("latin-1") for name in FORWARDED_HEADERS)
#: Response headers passed back from vLLM.
RETURNED_HEADERS = ("x-request-id",)
#: The last event of an OpenAI stream.
STREAM_END = b"data: [DONE]"
#: Every front-door answer names its request (``POST /v1/feedback`` takes that id).
REQUEST_ID_HEADER = "X-HiMoE-Request-Id"


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
    body = json_object(raw)
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
        dispatch: DispatchService,
        requests: RequestLog,
        metrics: ControlPlaneMetrics,
        loaded: LoadedAdapters,
        quarantine: Quarantine,
        chooser: ReplicaChooser,
    ) -> None:
        self.adapters = adapters
        self.router = router
        self.upstream = upstream
        self.outcomes = outcomes
        self.dispatch = dispatch
        self.requests = requests
        self.metrics = metrics
        self.loaded = loaded
        self.quarantine = quarantine
        self.chooser = chooser
        self._warm_first_tokens = WarmFirstTokens()

    async def models(self) -> dict[str, Any]:
        """``GET /v1/models``: the base model(s), every adapter and every ``name@version``."""
        adapters = await self.adapters.list_adapters()
        bases = sorted(self.router.base_names) or sorted(await self.router.refresh_base_names())
        return models_list(bases, adapters)

    async def handle(self, request: Request, endpoint: Endpoint, request_id: str) -> Response:
        """Route, forward and relay one completion request (metrics see every ending)."""
        account = RequestAccount(self.metrics, self.loaded, self._warm_first_tokens)
        try:
            return await self._handle(request, endpoint, request_id, account)
        except BaseException as exc:
            account.finished(status_of(exc))
            raise

    async def _handle(
        self, request: Request, endpoint: Endpoint, request_id: str, account: RequestAccount
    ) -> Response:
        raw = await request.body()
        body = parse_body(raw, endpoint)
        hinted = HINT_FIELD in body
        context_refs = take_hints(body)  # removes the field: vLLM must not see it
        dispatched: dict[str, str] = {}
        if body["model"] == AUTO:
            objective = objective_of(body, endpoint.required)
            deciding = time.perf_counter()
            decision = await self.dispatch.decide(objective, context_refs, request_id=request_id)
            self._count_decision(decision, time.perf_counter() - deciding)
            target = await self._target_of(decision)
            dispatched = decision_headers(decision)
        else:
            target = await self.router.route(body["model"])
        account.routed(target)
        quarantined = self.quarantine.reason(target.served_name)
        if quarantined is not None:  # vLLM's engine would die reloading it
            raise ServiceUnavailable(f"{target.served_name} cannot be served: {quarantined}")
        if target.served_name != body["model"] or hinted:
            body["model"] = target.served_name
            raw = _reencoded(body)
        headers = {"content-type": "application/json"}
        for raw_name, raw_value in request.scope["headers"]:  # one pass, no lookups that miss
            if raw_name in _FORWARDED_RAW:
                headers[raw_name.decode("latin-1")] = raw_value.decode("latin-1")
        stream = body.get("stream") is True
        choice = self.chooser.choose(target.served_name if target.is_adapter else None)
        upstream = await self.upstream.send(
            "POST",
            endpoint.path,
            content=raw,
            headers=headers,
            stream=stream,
            order=choice.order,
            retry=not stream,  # a stream may have sent bytes to the client before it breaks
        )
        reason = choice.reason if upstream.replica is choice.order[0] else "failover"
        self.metrics.upstream_routed(upstream.replica.url, reason)
        account.sent(upstream.replica.url)

        def finish(status: int) -> None:
            latency_ms = account.finished(status)
            outcome = Outcome(request_id, target, endpoint.path, status, latency_ms, stream)
            self.outcomes.record(outcome)

        answer_headers = {**target.headers(), **dispatched}  # guarded() adds the request id
        answer_headers.update(_returned_headers(upstream.headers))
        if not stream:
            return self._relay_whole(upstream, answer_headers, finish)
        if upstream.status_code != 200:
            try:
                await upstream.aread()
            finally:
                await upstream.aclose()
            return self._relay_whole(upstream, answer_headers, finish)
        return RelayedStream(upstream, answer_headers, finish, account)

    def _count_decision(self, decision: Decision, seconds: float) -> None:
        kind = decision.fallback_kind
        self.metrics.dispatched(decision.tier, decision.specialist, kind, seconds)
        if decision.specialist is None:
            self.metrics.routing_gaps.inc()

    async def _target_of(self, decision: Decision) -> Target:
        if decision.specialist is None:
            return await self.router.base_target(AUTO)
        return await self.router.route(decision.specialist)

    async def dry_run(self, raw: bytes) -> dict[str, Any]:
        """``POST /v1/dispatch``: the decision for one task, without generating anything."""
        task = validated(DispatchTaskIn, json_object(raw))
        decision = await self.dispatch.decide(task.objective, task.context_refs, record_gap=False)
        return dry_run_answer(decision, await self._target_of(decision))

    async def dispatch_batch(self, raw: bytes) -> dict[str, Any]:
        """``POST /v1/dispatch/batch``: decisions for many tasks, grouped by specialist.

        Each group names the one model (``name@version``, or the base model) its tasks should
        be sent to together; fallbacks are recorded as routing gaps.
        """
        batch = validated(DispatchBatchIn, json_object(raw))
        tasks = [Task(t.objective, tuple(t.context_refs)) for t in batch.tasks]
        decisions = await self.dispatch.decide_many(tasks)
        self.metrics.routing_gaps.inc(sum(1 for d in decisions if d.specialist is None))
        groups: dict[str | None, list[int]] = {}
        for index, decision in enumerate(decisions):
            groups.setdefault(decision.specialist, []).append(index)
        answer_groups = []
        targets: dict[str | None, Target] = {}
        for specialist, indices in groups.items():
            targets[specialist] = await self._target_of(decisions[indices[0]])
            answer_groups.append(
                {
                    "specialist": specialist,
                    "model": targets[specialist].served_name,
                    "version": targets[specialist].version,
                    "tasks": indices,
                }
            )
        return {
            "groups": answer_groups,
            "decisions": [
                dry_run_answer(decision, targets[decision.specialist]) for decision in decisions
            ],
        }

    async def feedback(self, raw: bytes) -> dict[str, Any]:
        """``POST /v1/feedback``: a client's verdict on one answered request (once per id)."""
        body = validated(FeedbackIn, json_object(raw))
        await self.outcomes.drain()  # the request's record may still be in the buffer
        result = await self.requests.feedback(body.request_id, body.success)
        return {
            "request_id": result.request_id,
            "served_model": result.served_name,
            "success": result.success,
            "recorded": result.recorded,
        }

    @staticmethod
    def _relay_whole(
        upstream: UpstreamResponse, headers: dict[str, str], finish: Callable[[int], None]
    ) -> Response:
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
        self,
        upstream: UpstreamResponse,
        headers: dict[str, str],
        finish: Callable[[int], None],
        account: RequestAccount,
    ) -> None:
        self._upstream = upstream
        self._finish = finish
        self._account = account
        self._completed = False
        headers = dict(headers)
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
                first = True
                tail = b""
                async for chunk in chunks:
                    if first:
                        first = False
                        self._account.first_chunk()
                    tail = (tail + chunk)[-len(STREAM_END) - 8 :]
                    if not self._completed and STREAM_END in tail:
                        # the answer is complete: clients (openai's) may hang up right after
                        # reading it, before vLLM's end of stream reaches us
                        self._completed = True
                        self._finish(self._upstream.status_code)
                    yield chunk
        except UpstreamUnavailable as exc:
            logger.warning("vLLM stream broke off: %s", exc.message)
            error = error_payload("upstream stream interrupted", "server_error", None, 503)
            yield f"data: {json.dumps(error)}\n\n".encode()
            self._finish(503)
            self._completed = True
            return
        if not self._completed:
            self._completed = True
            self._finish(self._upstream.status_code)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._upstream.aclose()
            if not self._completed:
                logger.info("client left a stream early; closed the upstream stream")
                self._account.finished(CLIENT_CLOSED)


def _reencoded(body: dict[str, Any]) -> bytes:
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    except RecursionError:  # parsed just below the limit, deeper once re-encoded
        raise InvalidRequest("request body is nested too deeply") from None


def _returned_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: headers[name] for name in RETURNED_HEADERS if name in headers}


def as_openai_error(exc: BaseException) -> OpenAIError | None:
    """The OpenAI-style error an exception is answered with (``None``: an internal error)."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, UpstreamTimeout):
        return GatewayTimeout(exc.message)
    if isinstance(exc, UpstreamUnavailable):
        return ServiceUnavailable(exc.message)
    if isinstance(exc, RegistryError):
        return RegistryRefusal(exc.detail, status=exc.status, code=exc.code)
    return None


def status_of(exc: BaseException) -> int:
    """The status a request that raised ``exc`` is answered with (499: the client left)."""
    if isinstance(exc, asyncio.CancelledError):
        return CLIENT_CLOSED
    error = as_openai_error(exc)
    return error.status if error is not None else 500


async def guarded(handler: Callable[[], Awaitable[Response]], request_id: str) -> Response:
    """Run ``handler``; any error becomes an OpenAI-style answer, never a stack trace.

    The front door's one error handler: its endpoints answer OpenAI's error shape, not the admin
    API's ``application/problem+json``. Every answer carries the request id.
    """
    headers = {REQUEST_ID_HEADER: request_id}
    try:
        response = await handler()
    except Exception as exc:
        error = as_openai_error(exc)
        if error is not None:
            return error_response(error, headers)
        logger.exception("front door failed")
        return JSONResponse(
            error_payload("internal error in the control plane", "server_error", None, 500),
            status_code=500,
            headers=headers,
        )
    response.headers.setdefault(REQUEST_ID_HEADER, request_id)
    return response
