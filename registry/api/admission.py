"""Admission for admin requests: at most a few are worked on at once, so serving keeps the loop.

Inference (``/v1``) and the admin API share one event loop. With dozens of operators calling at
once, every admin request in progress adds callbacks (parsing, validation, hand-offs to worker
threads, answers) to each turn of the loop, and a front-door request, which needs several turns,
waits behind all of them. :class:`AdminAdmission` (an ASGI middleware) lets at most
``limit`` admin requests past it at a time; the others wait, in arrival order, before any work
is done for them (a waiting request costs the loop nothing). The registry serialises its writes
anyway, so admin throughput hardly changes. The resolver's look-up and the artifact downloads
(``/admin/v1/artifacts/...``) are exempt: vLLM waits on them to load an adapter for a request
in flight.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Receive, Scope, Send

from hi_moe_lora.control_api import paths

#: Admin requests worked on at once (the worker threads they use number about as many).
ADMIN_CONCURRENCY = 4


class AdminAdmission:
    """Queue admin requests beyond ``limit`` in progress (see the module docstring)."""

    def __init__(self, app: ASGIApp, limit: int = ADMIN_CONCURRENCY) -> None:
        self.app = app
        self.limit = limit
        # one semaphore per event loop (an app may be served by several loops in turn: tests)
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._admin = paths.ADMIN_PREFIX + "/"
        self._exempt = tuple(
            paths.ADMIN_PREFIX + template.split("{", 1)[0]
            for template in (paths.RESOLVE, paths.ARTIFACT)
        )

    def admits(self, path: str) -> bool:
        """Whether ``path`` waits for a slot (admin API, not the resolver's look-up or the
        artifact downloads of vLLM hosts)."""
        return path.startswith(self._admin) and not path.startswith(self._exempt)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.admits(scope["path"]):
            await self.app(scope, receive, send)
            return
        async with self._semaphore():
            await self.app(scope, receive, send)

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.limit))
        return self._slots[1]
