"""The OpenAI-compatible endpoints of the control plane (thin: the work is in :mod:`.proxy`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from registry.dependencies import FrontDoorDep
from registry.openai.proxy import CHAT_COMPLETIONS, COMPLETIONS, guarded

router = APIRouter(tags=["openai"])


@router.post("/v1/chat/completions")
async def chat_completions(request: Request, door: FrontDoorDep) -> Response:
    return await guarded(lambda: door.handle(request, CHAT_COMPLETIONS))


@router.post("/v1/completions")
async def completions(request: Request, door: FrontDoorDep) -> Response:
    return await guarded(lambda: door.handle(request, COMPLETIONS))


@router.get("/v1/models")
async def list_models(door: FrontDoorDep) -> Response:
    async def models() -> Response:
        return JSONResponse(await door.models())

    return await guarded(models)
