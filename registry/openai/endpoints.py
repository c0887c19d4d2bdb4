"""The OpenAI-compatible endpoints of the control plane (thin: the work is in :mod:`.proxy`).

The completion endpoints are answered by :mod:`.fast_path` (the same admission, without
FastAPI's routing). Each request is admitted by an ``InferenceCaller`` (an API key when
``require_api_keys``; its name counted in ``hi_moe_lora_client_requests_total``); ``/v1/health``
by a ``HealthCaller``. Refusals are OpenAI-style 401/403 (``registry/api/access_errors.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import JSONResponse, Response

from hi_moe_lora.control_api import paths
from registry.components import Components
from registry.dependencies import (
    ComponentsDep,
    FrontDoorDep,
    HealthDep,
    health_caller,
    inference_caller,
)
from registry.openai.fast_path import complete
from registry.openai.proxy import CHAT_COMPLETIONS, COMPLETIONS, Endpoint, guarded
from registry.openai.request_ids import new_request_id
from registry.openai.schemas import (
    CHAT_BODY,
    COMPLETION_BODY,
    DISPATCH_BATCH_BODY,
    DISPATCH_BODY,
    FEEDBACK_BODY,
    DispatchBatchOut,
    DispatchDecisionOut,
    FeedbackOut,
    HealthOut,
    ModelListOut,
    OpenAIErrorOut,
    error_responses,
)

router = APIRouter(tags=["openai"])
#: Who may call: every route but the health picture takes an inference caller.
_INFERENCE = [Depends(inference_caller)]

#: A completion's answer is vLLM's (JSON, or server-sent events with ``"stream": true``); so
#: are its errors, relayed in OpenAI's shape with vLLM's status (``default``).
_COMPLETION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "vLLM's answer",
        "content": {"application/json": {}, "text/event-stream": {"schema": {"type": "string"}}},
    },
    **error_responses(400, 401, 403, 404, 413, 503, 504),
    "default": {"model": OpenAIErrorOut, "description": "vLLM's error, relayed"},
}


@router.post(
    "/v1/chat/completions",
    responses=_COMPLETION_RESPONSES,
    openapi_extra=CHAT_BODY,
)
async def chat_completions(request: Request, components: ComponentsDep) -> Response:
    return await _complete(request, CHAT_COMPLETIONS, components)


@router.post(
    "/v1/completions",
    responses=_COMPLETION_RESPONSES,
    openapi_extra=COMPLETION_BODY,
)
async def completions(request: Request, components: ComponentsDep) -> Response:
    return await _complete(request, COMPLETIONS, components)


async def _complete(request: Request, endpoint: Endpoint, components: Components) -> Response:
    # ControlPlaneApp answers these paths before routing (fast_path.CompletionPath, the same
    # code): the routes document them, and serve them in an app without that shortcut.
    gatekeeper, metrics, door = components.gatekeeper, components.metrics, components.front_door
    return await complete(request, endpoint, gatekeeper, metrics, door)


@router.get(
    "/v1/models",
    response_model=ModelListOut,
    responses=error_responses(401, 403, 503, 504),
    dependencies=_INFERENCE,
)
async def list_models(door: FrontDoorDep) -> Response:
    async def models() -> Response:
        return JSONResponse(await door.models())

    return await guarded(models, new_request_id())


@router.get(
    paths.V1_HEALTH,
    response_model=HealthOut,
    responses=error_responses(401, 403),
    dependencies=[Depends(health_caller)],
)
async def health(monitor: HealthDep) -> Response:
    """Every upstream and served adapter version as the health monitor last saw them."""

    async def picture() -> Response:
        return JSONResponse(monitor.snapshot().as_json())

    return await guarded(picture, new_request_id())


@router.post(
    paths.V1_DISPATCH,
    response_model=DispatchDecisionOut,
    responses=error_responses(400, 401, 403, 413, 503, 504),
    openapi_extra=DISPATCH_BODY,
    dependencies=_INFERENCE,
)
async def dispatch(request: Request, door: FrontDoorDep) -> Response:
    """Dry run: which specialist (and version) would serve this task, and why."""
    return await _json_answer(request, door.dry_run)


@router.post(
    paths.V1_DISPATCH_BATCH,
    response_model=DispatchBatchOut,
    responses=error_responses(400, 401, 403, 413, 503, 504),
    openapi_extra=DISPATCH_BATCH_BODY,
    dependencies=_INFERENCE,
)
async def dispatch_batch(request: Request, door: FrontDoorDep) -> Response:
    return await _json_answer(request, door.dispatch_batch)


@router.post(
    paths.V1_FEEDBACK,
    response_model=FeedbackOut,
    responses=error_responses(400, 401, 403, 404, 413),
    openapi_extra=FEEDBACK_BODY,
    dependencies=_INFERENCE,
)
async def feedback(request: Request, door: FrontDoorDep) -> Response:
    return await _json_answer(request, door.feedback)


async def _json_answer(
    request: Request, answer: Callable[[bytes], Awaitable[dict[str, Any]]]
) -> Response:
    """The front door's own JSON endpoints: the raw body in, ``answer``'s object out."""
    body = await request.body()

    async def respond() -> Response:
        return JSONResponse(await answer(body))

    return await guarded(respond, new_request_id())
