"""AdminAdmission: at most ``limit`` admin requests in progress; inference and the resolver's
look-up are never held back (a real ASGI app behind it, driven over ASGI by httpx)."""

from __future__ import annotations

import asyncio

import httpx
from starlette.types import Receive, Scope, Send

from registry.api.admission import AdminAdmission


class SlowApp:
    """An ASGI app that answers after a pause and records how many requests it held at once."""

    def __init__(self) -> None:
        self.in_progress = 0
        self.most = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.in_progress += 1
        self.most = max(self.most, self.in_progress)
        await asyncio.sleep(0.05)
        self.in_progress -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def _burst(app: SlowApp | AdminAdmission, path: str, count: int) -> list[int]:
    admitted = app if isinstance(app, AdminAdmission) else AdminAdmission(app, limit=2)
    transport = httpx.ASGITransport(app=admitted)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answers = await asyncio.gather(*(client.get(path) for _ in range(count)))
    return [answer.status_code for answer in answers]


async def test_admin_requests_beyond_the_limit_wait_their_turn() -> None:
    app = SlowApp()
    assert await _burst(app, "/admin/v1/adapters", 6) == [200] * 6
    assert app.most == 2


async def test_inference_and_the_resolver_are_not_held_back() -> None:
    for path in ("/v1/completions", "/admin/v1/resolve/spec@1.0.0"):
        app = SlowApp()
        assert await _burst(app, path, 6) == [200] * 6
        assert app.most == 6, path


def test_one_app_served_by_one_loop_after_another() -> None:
    app = SlowApp()
    admitted = AdminAdmission(app, limit=2)
    for _ in range(2):  # each asyncio.run is a new event loop
        assert asyncio.run(_burst(admitted, "/admin/v1/adapters", 4)) == [200] * 4
    assert app.most == 2
