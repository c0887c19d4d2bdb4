"""The OpenAI-compatible endpoints of the control plane (thin: the work is in :mod:`proxy`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from registry.openai.catalog import models_list
from registry.openai.proxy import CHAT_COMPLETIONS, COMPLETIONS, Endpoint, guarded
from registry.openai.state import front_door_of

router = APIRouter(tags=["openai"])


async def _complete(request: Request, endpoint: Endpoint) -> Response:
    async def handler() -> Response:
        return await front_door_of(request.app).handle(request, endpoint)

    return await guarded(handler)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    return await _complete(request, CHAT_COMPLETIONS)


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    return await _complete(request, COMPLETIONS)


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    async def handler() -> Response:
        door = front_door_of(request.app)
        adapters = await door.adapters.list_adapters()
        bases = sorted(door.router.base_names) or sorted(await door.router.refresh_base_names())
        return JSONResponse(models_list(bases, adapters))

    return await guarded(handler)
