"""The OpenAI-compatible front door: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

Clients use the stock ``openai`` client against the control plane and name a specialist
(``python-lora``), a pinned version (``python-lora@1.2.0``) or the base model; the request goes to
vLLM with ``model`` rewritten to the served ``name@version`` (see :mod:`registry.openai.proxy`).
``create_app`` calls :func:`install`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from registry.openai.errors import OpenAIError, openai_error_handler
from registry.openai.routes import router
from registry.openai.state import STATE_ATTRIBUTE, FrontDoorState
from registry.openai.upstream import UpstreamPool
from registry.settings import ControlPlaneSettings

__all__ = ["install"]

logger = logging.getLogger(__name__)


def install(app: FastAPI, settings: ControlPlaneSettings) -> None:
    """Add the OpenAI endpoints to ``app`` (idempotent)."""
    if isinstance(getattr(app.state, STATE_ATTRIBUTE, None), FrontDoorState):
        return
    api_key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    upstream = UpstreamPool(
        settings.vllm_urls, request_timeout_s=settings.request_timeout_s, api_key=api_key
    )
    state = FrontDoorState(upstream, settings.base_model)
    setattr(app.state, STATE_ATTRIBUTE, state)
    adapters = getattr(app.state, "adapters", None)
    if adapters is not None:
        state.bind(adapters)
    app.include_router(router)
    app.add_exception_handler(OpenAIError, openai_error_handler)
    _wrap_lifespan(app, state)
    logger.info("OpenAI front door installed (vLLM: %s)", ", ".join(settings.vllm_urls))


def _wrap_lifespan(app: FastAPI, state: FrontDoorState) -> None:
    """Bind to the adapter service once the app has started; close the client at shutdown."""
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app_: Any) -> AsyncIterator[Any]:
        async with inner(app_) as inner_state:
            adapters = getattr(app.state, "adapters", None)
            if adapters is not None:
                state.bind(adapters)
            try:
                yield inner_state
            finally:
                await state.aclose()

    app.router.lifespan_context = lifespan
