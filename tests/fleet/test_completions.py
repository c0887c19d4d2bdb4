"""One greedy completion straight to one replica: its text, or why there is none."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from registry.fleet.completions import greedy_completion
from registry.fleet.upstreams import UpstreamPool
from tests.openai.live import ServedApp


async def _completions(request: Request) -> Response:
    body = await request.json()
    assert body["temperature"] == 0
    if body["model"] == "missing":
        return JSONResponse({"error": {"message": "no such adapter"}}, status_code=404)
    if body["model"] == "odd":
        return JSONResponse({"choices": []})
    return JSONResponse(
        {"choices": [{"index": 0, "text": f"{body['model']}:{body['max_tokens']}"}]}
    )


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    served = ServedApp(Starlette(routes=[Route("/v1/completions", _completions, methods=["POST"])]))
    served.start()
    yield served.url
    served.stop()


async def test_text_problem_and_unreachable(upstream: str) -> None:
    pool = UpstreamPool([upstream, "http://127.0.0.1:9"], read_timeout_s=10)
    live, dead = pool.replicas
    try:
        ok = await greedy_completion(pool, live, "a@1.0.0", "hi", max_tokens=3, timeout_s=5)
        assert (ok.text, ok.problem) == ("a@1.0.0:3", None)
        assert ok.elapsed_ms > 0
        missing = await greedy_completion(pool, live, "missing", "hi", max_tokens=1, timeout_s=5)
        assert missing.text is None
        assert missing.problem == "HTTP 404: no such adapter"
        odd = await greedy_completion(pool, live, "odd", "hi", max_tokens=1, timeout_s=5)
        assert odd.problem == "the completion has no choices[0].text"
        gone = await greedy_completion(pool, dead, "a", "hi", max_tokens=1, timeout_s=5)
        assert gone.text is None
        assert gone.problem is not None
        assert "ConnectError" in gone.problem
    finally:
        await pool.aclose()
