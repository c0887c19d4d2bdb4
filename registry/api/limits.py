"""Request body size limit for the whole app (admin API and ``/v1``): an ASGI middleware.

A body whose ``Content-Length`` exceeds the limit is refused before any of it is read; a body
without one (chunked) is counted as it streams in and refused as soon as it passes the limit,
so a hostile client never makes the control plane buffer more than the limit. The refusal is
a 413 in the error shape of the path: OpenAI-style under ``/v1``, ``application/problem+json``
elsewhere. Whatever the application had started to answer to the truncated body is discarded.
"""

from __future__ import annotations

from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from registry.api.problems import PROBLEM_TYPE_BASE, problem_response
from registry.api.schemas import Problem
from registry.errors import BodyTooLargeError
from registry.openai.errors import error_payload

#: Paths answered in the OpenAI error shape (the front door).
OPENAI_PREFIX = "/v1"


def too_large_response(path: str, max_bytes: int) -> Response:
    """413 in the shape clients of ``path`` expect."""
    detail = f"request body larger than {max_bytes} bytes"
    if path == OPENAI_PREFIX or path.startswith(OPENAI_PREFIX + "/"):
        payload = error_payload(
            detail, "invalid_request_error", None, BodyTooLargeError.default_code
        )
        return JSONResponse(payload, status_code=413)
    problem = Problem(
        type=PROBLEM_TYPE_BASE + BodyTooLargeError.default_code,
        title=BodyTooLargeError.title,
        status=413,
        detail=detail,
        code=BodyTooLargeError.default_code,
    )
    return problem_response(problem)


def _declared_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with a 413 (see the module docstring)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_bytes:
            await too_large_response(scope["path"], self.max_bytes)(scope, receive, send)
            return
        received = 0
        exceeded = False
        started = False

        async def counted_receive() -> Message:
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    exceeded = True
                    raise BodyTooLargeError(f"request body larger than {self.max_bytes} bytes")
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded and not started:
                return  # the app's answer to a truncated body: ours replaces it
            started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except BodyTooLargeError:
            if started:
                raise
        if exceeded and not started:
            await too_large_response(scope["path"], self.max_bytes)(scope, receive, send)
