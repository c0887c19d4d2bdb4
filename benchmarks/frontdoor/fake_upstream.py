"""FAKE UPSTREAM — stands in for vLLM only to measure the control plane's own overhead.

A raw ASGI app that answers the OpenAI endpoints the front door forwards to with a fixed,
vLLM-shaped body (echoing the requested ``model``) as fast as it can, so that the difference
between calling it directly and calling it through the control plane is our overhead alone.
Never use it to test behaviour: the tests run against the real vLLM CPU server.

Pacing, like a decoder: with ``FAKE_UPSTREAM_TOKEN_MS`` > 0 (default 0: at once) a request
takes ``max_tokens`` (default 16) steps of that many milliseconds. A streamed request
(``"stream": true``) sends one server-sent event per step and then ``data: [DONE]``; any other
answers once, after all steps.

Run: ``python -m uvicorn benchmarks.frontdoor.fake_upstream:app --port 9000``, or
:func:`start` from a benchmark.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from hi_moe_lora.app.processes import ManagedProcess

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

REPO_ROOT = Path(__file__).resolve().parents[2]


TOKEN_MS_ENV = "FAKE_UPSTREAM_TOKEN_MS"
_TOKEN_S = float(os.environ.get(TOKEN_MS_ENV, "0")) / 1000.0


def start(
    port: int, log_path: Path, token_ms: float = 0.0, prefix: Sequence[str] = ()
) -> ManagedProcess:
    """This app under uvicorn on ``port`` (quiet, no access log), started; stop it when done.

    ``prefix`` goes before the command (e.g. ``taskset -c 0``)."""
    argv = [*prefix, sys.executable, "-m", "uvicorn", f"{__name__}:app", "--port", str(port)]
    argv += ["--log-level", "warning", "--no-access-log", "--backlog", "4096"]
    env = {**os.environ, TOKEN_MS_ENV: str(token_ms)}
    return ManagedProcess("fake upstream", argv, log_path, cwd=REPO_ROOT, env=env).start()


_MODELS = {"object": "list", "data": [{"id": "base", "object": "model", "owned_by": "fake"}]}


def _completion(model: str) -> dict[str, Any]:
    return {
        "id": "cmpl-fake",
        "object": "text_completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "text": " fake", "finish_reason": "length", "logprobs": None}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5},
    }


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _event(model: str, step: int) -> bytes:
    chunk = {
        "id": "cmpl-fake",
        "object": "text_completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "text": f" t{step}", "finish_reason": None, "logprobs": None}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


async def _stream(send: Send, model: str, steps: int) -> None:
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for step in range(steps):
        if _TOKEN_S > 0:
            await asyncio.sleep(_TOKEN_S)
        await send({"type": "http.response.body", "body": _event(model, step), "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    raw = await _body(receive)
    if scope["path"] == "/v1/models" or scope["path"] == "/health":
        payload: dict[str, Any] = _MODELS
    else:
        try:
            request = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            request = {}
        model = str(request.get("model", "base"))
        steps = int(request.get("max_tokens") or 16)
        if request.get("stream") is True:
            await _stream(send, model, steps)
            return
        if _TOKEN_S > 0:
            await asyncio.sleep(_TOKEN_S * steps)
        payload = _completion(model)
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
