"""Access refusals (401/403) in the error shape of the path they answer.

The admin API and operations answer RFC 9457 problems (``unauthorized``, ``forbidden``); the
front door ``/v1`` answers OpenAI's error shape (``invalid_api_key``, ``insufficient_scope``), as
OpenAI clients expect. Every 401 carries ``WWW-Authenticate: Bearer``.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from registry.access.errors import AccessError, UnauthorizedError
from registry.api.problems import PROBLEM_TYPE_BASE, problem_response
from registry.api.schemas import Problem
from registry.openai.errors import error_payload

OPENAI_PREFIX = "/v1"
#: ``code`` of the front door's refusals, by status.
OPENAI_CODES = {401: "invalid_api_key", 403: "insufficient_scope"}


def access_response(path: str, error: AccessError) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, UnauthorizedError) else None
    if path == OPENAI_PREFIX or path.startswith(OPENAI_PREFIX + "/"):
        payload = error_payload(
            error.detail, "invalid_request_error", None, OPENAI_CODES.get(error.status)
        )
        return JSONResponse(payload, status_code=error.status, headers=headers)
    problem = Problem(
        type=PROBLEM_TYPE_BASE + error.code,
        title=error.title,
        status=error.status,
        detail=error.detail,
        code=error.code,
    )
    return problem_response(problem, headers)


async def _handle(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, AccessError)
    return access_response(request.url.path, exc)


def install_access_handler(app: FastAPI) -> None:
    """Answer :class:`AccessError` (more specific than the problem handler's RegistryError)."""
    app.add_exception_handler(AccessError, _handle)
