"""The OpenAI-compatible endpoints of the control plane (thin: the work is in :mod:`.proxy`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from hi_moe_lora.control_api import paths
from registry.dependencies import FrontDoorDep, HealthDep
from registry.openai.proxy import CHAT_COMPLETIONS, COMPLETIONS, guarded, new_request_id

router = APIRouter(tags=["openai"])


@router.post("/v1/chat/completions")
async def chat_completions(request: Request, door: FrontDoorDep) -> Response:
    request_id = new_request_id()
    return await guarded(lambda: door.handle(request, CHAT_COMPLETIONS, request_id), request_id)


@router.post("/v1/completions")
async def completions(request: Request, door: FrontDoorDep) -> Response:
    request_id = new_request_id()
    return await guarded(lambda: door.handle(request, COMPLETIONS, request_id), request_id)


@router.get("/v1/models")
async def list_models(door: FrontDoorDep) -> Response:
    async def models() -> Response:
        return JSONResponse(await door.models())

    return await guarded(models, new_request_id())


@router.get(paths.V1_HEALTH)
async def health(monitor: HealthDep) -> Response:
    """Every upstream and served adapter version as the health monitor last saw them."""

    async def picture() -> Response:
        return JSONResponse(monitor.snapshot().as_json())

    return await guarded(picture, new_request_id())


@router.post(paths.V1_DISPATCH)
async def dispatch(request: Request, door: FrontDoorDep) -> Response:
    """Dry run: which specialist (and version) would serve this task, and why."""
    return await _json_answer(request, door.dry_run)


@router.post(paths.V1_DISPATCH_BATCH)
async def dispatch_batch(request: Request, door: FrontDoorDep) -> Response:
    return await _json_answer(request, door.dispatch_batch)


@router.post(paths.V1_FEEDBACK)
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
