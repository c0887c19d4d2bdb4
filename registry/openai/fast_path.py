"""The front door's completion endpoints, answered straight from ASGI.

``POST /v1/completions`` and ``POST /v1/chat/completions`` carry nearly all of the traffic. Through
FastAPI each paid for route matching over every admin route, dependency solving, and four
middleware layers (exception handling, an exit stack, admission, the body limit): under load that
machinery took more of the event loop than forwarding the request. :class:`CompletionPath` answers
these two paths itself, doing exactly what the FastAPI routes in :mod:`.endpoints` would: the body
limit (:class:`registry.api.limits.BodyLimit`, the same middleware), admission of an inference
caller (OpenAI-style 401/403), the per-client count, a request id and :meth:`FrontDoor.handle`.
The routes remain, for the OpenAPI document and as the same code (:func:`complete`) behind them.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from registry.access.errors import AccessError
from registry.access.gatekeeper import Gatekeeper
from registry.api.access_errors import access_response
from registry.api.limits import BodyLimit
from registry.metrics.families import ControlPlaneMetrics
from registry.openai.proxy import CHAT_COMPLETIONS, COMPLETIONS, Endpoint, FrontDoor, guarded
from registry.openai.request_ids import new_request_id

#: The paths answered here, and what each requires of its body.
ENDPOINTS: dict[str, Endpoint] = {
    COMPLETIONS.path: COMPLETIONS,
    CHAT_COMPLETIONS.path: CHAT_COMPLETIONS,
}


async def complete(
    request: Request,
    endpoint: Endpoint,
    gatekeeper: Gatekeeper,
    metrics: ControlPlaneMetrics,
    door: FrontDoor,
) -> Response:
    """One completion request: admit its caller, count it, name it, and hand it to the door."""
    try:
        caller = await gatekeeper.inference(_authorization(request.scope))
    except AccessError as exc:
        return access_response(request.url.path, exc)
    metrics.client_request(caller.name)
    request_id = new_request_id()
    return await guarded(lambda: door.handle(request, endpoint, request_id), request_id)


def _authorization(scope: Scope) -> str | None:
    # ASGI header names are lowercase bytes; scanning them beats building a Headers mapping
    for name, value in scope["headers"]:
        if name == b"authorization":
            text: str = value.decode("latin-1")
            return text
    return None


class CompletionPath:
    """An ASGI app for :data:`ENDPOINTS` (``handles`` says whether a request is one of them)."""

    def __init__(
        self,
        gatekeeper: Gatekeeper,
        metrics: ControlPlaneMetrics,
        door: FrontDoor,
        max_body_bytes: int,
    ) -> None:
        self._gatekeeper = gatekeeper
        self._metrics = metrics
        self._door = door
        self._limited: ASGIApp = BodyLimit(self._answer, max_bytes=max_body_bytes)

    @staticmethod
    def handles(scope: Scope) -> bool:
        return scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in ENDPOINTS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._limited(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        endpoint = ENDPOINTS[scope["path"]]
        response = await complete(request, endpoint, self._gatekeeper, self._metrics, self._door)
        await response(scope, receive, send)
