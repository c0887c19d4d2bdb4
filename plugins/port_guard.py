"""vLLM's API key on every path of its API server, not only under ``/v1``.

vLLM 0.32 checks ``VLLM_API_KEY`` only on paths starting with ``/v1``, ``/v2``, ``/inference``
and ``/cohere``. With runtime LoRA updating on, SageMaker's ``POST /adapters`` and
``DELETE /adapters/{name}`` load and unload adapters without it, and ``/invocations`` runs
inference (docs/security.md, "vLLM's port"). :class:`KeyOnEveryPath` is an ASGI middleware that
vLLM adds with ``--middleware plugins.port_guard.KeyOnEveryPath`` (the launcher does when it sets
a key): every request but the liveness and metrics paths in :data:`OPEN_PATHS` must carry
``Authorization: Bearer <VLLM_API_KEY>``, compared in constant time. Without ``VLLM_API_KEY`` it
lets everything through (vLLM has no key either).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os

from starlette.types import ASGIApp, Receive, Scope, Send

ENV_VLLM_API_KEY = "VLLM_API_KEY"
#: Paths answered without the key: liveness (the launcher's and orchestrators' probes) and
#: Prometheus' scrape (``/metrics`` and below).
OPEN_PATHS = frozenset({"/health", "/ping", "/metrics"})


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith("/metrics/")


class KeyOnEveryPath:
    """Refuse (401) any request without vLLM's API key, on every path but :data:`OPEN_PATHS`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        key = os.environ.get(ENV_VLLM_API_KEY) or ""
        self._digest = hashlib.sha256(key.encode()).digest() if key else None

    def _authorized(self, scope: Scope) -> bool:
        assert self._digest is not None
        header = b""
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                header = value
                break
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        return hmac.compare_digest(hashlib.sha256(token).digest(), self._digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self._digest is None
            or scope["type"] not in ("http", "websocket")
            or scope.get("method") == "OPTIONS"
            or is_open(scope["path"].removeprefix(scope.get("root_path", "")))
            or self._authorized(scope)
        ):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": "Unauthorized"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
