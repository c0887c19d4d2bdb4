"""The front door's request path, over real HTTP with the stock ``openai`` client.

Error paths need no vLLM (a control plane whose vLLM URL is a closed port, or a scripted upstream
for what vLLM cannot be made to do on demand); everything else runs against the session's real
vLLM CPU server (marked ``vllm``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hi_moe_lora.app.processes import free_port
from registry.fleet.upstreams import UpstreamUnavailable
from registry.openai.errors import InvalidRequest
from registry.openai.proxy import CHAT_COMPLETIONS, COMPLETIONS, parse_body
from tests.conftest import VllmServer
from tests.metrics.scrape import value
from tests.openai.live import ServedApp, control_plane_settings, register, serve_control_plane
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter
from tests.support.sockets import unanswered_connects

CHAT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "def fibonacci(n):"}]
PROMPT = "def fibonacci(n):"
#: How long the scripted vLLM stays silent on ``prompt="hang"`` (longer than the read bound).
HANG_S = 3.0


def _error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


# ------------------------------------------------------------------ no vLLM needed


@pytest.fixture(scope="module")
def unreachable_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    """A control plane whose only vLLM replica is a closed port; one adapter registered."""
    workdir = tmp_path_factory.mktemp("unreachable")
    settings = control_plane_settings(
        workdir, DEFAULT_BASE_MODEL, [f"http://127.0.0.1:{free_port()}"], upstream_read_timeout_s=5
    )
    served = serve_control_plane(settings)
    register(served.url, "known", "1.0.0", write_adapter(workdir / "src"))
    yield served
    served.stop()


@pytest.fixture
def plane_client(unreachable_plane: ServedApp) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(
        base_url=f"{unreachable_plane.url}/v1", api_key="x", max_retries=0, timeout=20
    )
    yield client
    client.close()


def test_unreachable_vllm_is_503_without_hanging(plane_client: openai.OpenAI) -> None:
    for model in ("known", "known@1.0.0", DEFAULT_BASE_MODEL):
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError) as caught:
            plane_client.chat.completions.create(model=model, messages=CHAT, max_tokens=4)
        assert time.monotonic() - started < 10
        assert caught.value.status_code == 503
        assert caught.value.code == "upstream_unavailable"
        assert "Traceback" not in str(caught.value.body)


def test_unreachable_vllm_stream_is_503(plane_client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        plane_client.completions.create(model="known", prompt=PROMPT, max_tokens=4, stream=True)
    assert caught.value.status_code == 503


@pytest.mark.parametrize("model", ["unknown-adapter", "known@9.9.9", "known@not-semver", "A B"])
def test_unknown_model_is_404(plane_client: openai.OpenAI, model: str) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        plane_client.chat.completions.create(model=model, messages=CHAT, max_tokens=4)
    assert caught.value.code == "model_not_found"
    assert caught.value.param == "model"


@pytest.mark.parametrize(
    ("path", "content", "param"),
    [
        ("/v1/chat/completions", b"{not json", None),
        ("/v1/chat/completions", b"[1, 2]", None),
        ("/v1/chat/completions", b'{"messages": []}', "model"),
        ("/v1/chat/completions", b'{"model": "", "messages": []}', "model"),
        ("/v1/chat/completions", b'{"model": 3, "messages": []}', "model"),
        ("/v1/chat/completions", b'{"model": "known"}', "messages"),
        ("/v1/chat/completions", b'{"model": "known", "messages": "hi"}', "messages"),
        ("/v1/completions", b'{"model": "known"}', "prompt"),
        ("/v1/completions", b'{"model": "known", "prompt": 5}', "prompt"),
    ],
)
def test_invalid_requests_are_400(
    unreachable_plane: ServedApp, path: str, content: bytes, param: str | None
) -> None:
    response = httpx.post(
        unreachable_plane.url + path,
        content=content,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    error = _error(response)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_parse_body_keeps_every_field() -> None:
    raw = json.dumps({"model": "m", "prompt": "p", "logit_bias": {"1": 2}, "x_extra": [1]})
    assert parse_body(raw.encode(), COMPLETIONS)["x_extra"] == [1]
    with pytest.raises(InvalidRequest):
        parse_body(raw.encode(), CHAT_COMPLETIONS)


# ------------------------------------------------------------------ scripted upstream


class ScriptedVllm:
    """A stand-in for vLLM's HTTP surface where the test needs behaviour on demand."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.stream_closed = asyncio.Event()
        self.chunks_sent = 0
        self.app = Starlette(
            routes=[
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
            ]
        )

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "served-base", "parent": None}]})

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        self.received.append(body)
        if body["prompt"] == "reject":
            return JSONResponse(
                {
                    "object": "error",
                    "message": "max_tokens too large",
                    "type": "BadRequestError",
                    "param": "max_tokens",
                    "code": 400,
                },
                status_code=400,
            )
        if body["prompt"] == "break":
            return StreamingResponse(self._broken(body["model"]), media_type="text/event-stream")
        if body["prompt"] == "linger":
            return StreamingResponse(self._lingering(body["model"]), media_type="text/event-stream")
        if body["prompt"] == "hang":  # a hung vLLM: took the request, answers nothing for long
            await asyncio.sleep(HANG_S)
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": "1",
                    "object": "text_completion",
                    "model": body["model"],
                    "choices": [{"index": 0, "text": "ok"}],
                }
            )
        return StreamingResponse(self._endless(body["model"]), media_type="text/event-stream")

    async def _broken(self, model: str) -> AsyncIterator[bytes]:
        chunk = {"model": model, "choices": [{"index": 0, "text": "x"}]}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
        await asyncio.sleep(0.05)
        raise RuntimeError("vLLM died mid-stream")  # uvicorn drops the connection

    async def _lingering(self, model: str) -> AsyncIterator[bytes]:
        """A complete answer, but the end of the stream comes a while after ``[DONE]``."""
        chunk = {"model": model, "choices": [{"index": 0, "text": "x"}]}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"
        await asyncio.sleep(1.0)

    async def _endless(self, model: str) -> AsyncIterator[bytes]:
        try:
            while True:
                chunk = {"model": model, "choices": [{"index": 0, "text": "x"}]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
                self.chunks_sent += 1
                await asyncio.sleep(0.02)
        finally:
            self.stream_closed.set()


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[tuple[ScriptedVllm, ServedApp, ServedApp]]:
    upstream = ScriptedVllm()
    served_upstream = ServedApp(upstream.app).start()
    settings = control_plane_settings(
        tmp_path / "plane", DEFAULT_BASE_MODEL, [served_upstream.url], upstream_read_timeout_s=5
    )
    plane = serve_control_plane(settings)
    register(plane.url, "known", "1.0.0", write_adapter(tmp_path / "src"))
    yield upstream, served_upstream, plane
    plane.stop()
    served_upstream.stop()


def test_body_is_forwarded_untouched_but_for_model(
    scripted: tuple[ScriptedVllm, ServedApp, ServedApp],
) -> None:
    upstream, _, plane = scripted
    body = {"model": "known", "prompt": "hi", "max_tokens": 3, "logit_bias": {"7": -1}, "x": [1]}
    response = httpx.post(f"{plane.url}/v1/completions", json=body)
    assert response.status_code == 200
    assert upstream.received[-1] == {**body, "model": "known@1.0.0"}
    assert response.json()["model"] == "known@1.0.0"
    assert response.headers["x-himoe-served-model"] == "known@1.0.0"
    assert response.headers["x-himoe-adapter-version"] == "1.0.0"


def test_the_dispatch_field_never_reaches_vllm(
    scripted: tuple[ScriptedVllm, ServedApp, ServedApp],
) -> None:
    upstream, _, plane = scripted
    # already the served name, so nothing else would make the body be rewritten
    for hint in ({"context_refs": []}, {"context_refs": ["a.py"]}):
        body = {"model": "known@1.0.0", "prompt": "hi", "dispatch": hint}
        response = httpx.post(f"{plane.url}/v1/completions", json=body)
        assert response.status_code == 200
        assert upstream.received[-1] == {"model": "known@1.0.0", "prompt": "hi"}


def test_base_model_goes_under_vllms_served_name(
    scripted: tuple[ScriptedVllm, ServedApp, ServedApp],
) -> None:
    upstream, _, plane = scripted
    for model in (DEFAULT_BASE_MODEL, "served-base"):
        response = httpx.post(f"{plane.url}/v1/completions", json={"model": model, "prompt": "a"})
        assert response.status_code == 200
        assert upstream.received[-1]["model"] == "served-base"
        assert response.headers["x-himoe-served-model"] == "served-base"
        assert "x-himoe-adapter-version" not in response.headers


def test_vllm_errors_pass_through_in_openai_form(
    scripted: tuple[ScriptedVllm, ServedApp, ServedApp],
) -> None:
    _, _, plane = scripted
    for stream in (False, True):
        response = httpx.post(
            f"{plane.url}/v1/completions",
            json={"model": "known", "prompt": "reject", "stream": stream},
        )
        assert response.status_code == 400
        error = _error(response)
        assert error == {
            "message": "max_tokens too large",
            "type": "BadRequestError",
            "param": "max_tokens",
            "code": 400,
        }


def test_client_leaving_a_stream_closes_the_upstream(
    scripted: tuple[ScriptedVllm, ServedApp, ServedApp],
) -> None:
    upstream, _, plane = scripted
    with httpx.stream(
        "POST",
        f"{plane.url}/v1/completions",
        json={"model": "known", "prompt": "hi", "stream": True},
        timeout=10,
    ) as response:
        assert response.status_code == 200
        assert response.headers["x-himoe-served-model"] == "known@1.0.0"
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first.removeprefix("data: "))["model"] == "known@1.0.0"
    # the client hung up: the relay must close its upstream stream promptly
    deadline = time.monotonic() + 5
    while not upstream.stream_closed.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.stream_closed.is_set()
    sent = upstream.chunks_sent
    time.sleep(0.3)
    assert upstream.chunks_sent == sent


def test_stream_is_relayed_unbuffered(
    scripted: tuple[ScriptedVllm, ServedApp, ServedApp],
) -> None:
    _, _, plane = scripted
    started = time.monotonic()
    with httpx.stream(
        "POST",
        f"{plane.url}/v1/completions",
        json={"model": "known", "prompt": "hi", "stream": True},
        timeout=10,
    ) as response:
        events = 0
        for line in response.iter_lines():
            if line.startswith("data: "):
                events += 1
            if events == 3:
                break
    # an endless upstream stream: a buffering relay would never hand out three events
    assert time.monotonic() - started < 3


def test_stream_broken_off_upstream_ends_with_an_error_event(
    scripted: tuple[ScriptedVllm, ServedApp, ServedApp],
) -> None:
    _, _, plane = scripted
    with httpx.stream(
        "POST",
        f"{plane.url}/v1/completions",
        json={"model": "known", "prompt": "break", "stream": True},
        timeout=10,
    ) as response:
        assert response.status_code == 200
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert json.loads(events[0].removeprefix("data: "))["model"] == "known@1.0.0"
    error = json.loads(events[-1].removeprefix("data: "))["error"]
    assert error["message"] == "upstream stream interrupted"
    assert error["code"] == 503


@pytest.fixture
def impatient(tmp_path: Path) -> Iterator[ServedApp]:
    """A control plane with a 0.5 s read timeout in front of the scripted vLLM (stopped without
    waiting out a hung request: the test is over once the control plane gave up on it)."""
    served_upstream = ServedApp(ScriptedVllm().app, graceful_shutdown_s=0).start()
    settings = control_plane_settings(
        tmp_path / "plane", DEFAULT_BASE_MODEL, [served_upstream.url], upstream_read_timeout_s=0.5
    )
    plane = serve_control_plane(settings)
    register(plane.url, "known", "1.0.0", write_adapter(tmp_path / "src"))
    yield plane
    plane.stop()
    served_upstream.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_a_hung_vllm_is_504_after_the_read_timeout(impatient: ServedApp, stream: bool) -> None:
    started = time.monotonic()
    response = httpx.post(
        f"{impatient.url}/v1/completions",
        json={"model": "known", "prompt": "hang", "stream": stream},
        timeout=30,
    )
    elapsed = time.monotonic() - started
    assert response.status_code == 504
    error = _error(response)
    assert (error["type"], error["code"]) == ("server_error", "upstream_timeout")
    assert "did not answer in time" in error["message"]
    assert 0.4 < elapsed < HANG_S  # the read bound, not vLLM, ended it
    assert response.headers["x-himoe-request-id"]
    # the replica was not marked down: the next request is served
    ok = httpx.post(f"{impatient.url}/v1/completions", json={"model": "known", "prompt": "x"})
    assert ok.status_code == 200


def test_a_vllm_that_takes_no_connections_is_503_after_the_connect_timeout(
    tmp_path: Path,
) -> None:
    with unanswered_connects() as url:
        settings = control_plane_settings(
            tmp_path / "plane", DEFAULT_BASE_MODEL, [url], upstream_connect_timeout_s=0.5
        )
        plane = serve_control_plane(settings)
        try:
            register(plane.url, "known", "1.0.0", write_adapter(tmp_path / "src"))
            started = time.monotonic()
            response = httpx.post(
                f"{plane.url}/v1/completions", json={"model": "known", "prompt": "x"}, timeout=30
            )
            elapsed = time.monotonic() - started
        finally:
            plane.stop()
    assert response.status_code == 503
    assert _error(response)["code"] == "upstream_unavailable"
    assert elapsed < 2.5


async def test_upstream_unavailable_names_the_cause() -> None:
    from registry.fleet.upstreams import UpstreamPool

    pool = UpstreamPool([f"http://127.0.0.1:{free_port()}"], read_timeout_s=2)
    with pytest.raises(UpstreamUnavailable) as caught:
        await pool.send("GET", "/v1/models")
    assert "ConnectError" in caught.value.message
    await pool.aclose()


# ------------------------------------------------------------------ real vLLM

vllm_only = pytest.mark.vllm


def _chat(client: openai.OpenAI, model: str, **kwargs: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model=model, messages=CHAT, max_tokens=8, temperature=0.0, **kwargs
    )


@vllm_only
def test_chat_and_completions_through_the_front_door(
    gateway: openai.OpenAI,
    fresh_name: Callable[[str], str],
    register_demo: Callable[..., dict[str, Any]],
) -> None:
    name = fresh_name("fd-chat")
    register_demo(name, "1.0.0")
    raw = _chat(gateway, name)
    assert raw.headers["x-himoe-served-model"] == f"{name}@1.0.0"
    assert raw.headers["x-himoe-adapter-version"] == "1.0.0"
    chat = raw.parse()
    assert chat.model == f"{name}@1.0.0"
    assert chat.choices[0].message.content
    assert chat.usage.completion_tokens <= 8

    completion = gateway.completions.create(
        model=name, prompt=PROMPT, max_tokens=8, temperature=0.0
    )
    assert completion.model == f"{name}@1.0.0"
    assert completion.choices[0].text


@vllm_only
def test_streaming_equals_non_streaming(
    gateway: openai.OpenAI,
    fresh_name: Callable[[str], str],
    register_demo: Callable[..., dict[str, Any]],
) -> None:
    name = fresh_name("fd-stream")
    register_demo(name, "1.0.0")
    whole = gateway.completions.create(model=name, prompt=PROMPT, max_tokens=8, temperature=0.0)
    chunks = list(
        gateway.completions.create(
            model=name, prompt=PROMPT, max_tokens=8, temperature=0.0, stream=True
        )
    )
    assert len(chunks) > 1
    assert {chunk.model for chunk in chunks} == {f"{name}@1.0.0"}
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text

    chat_whole = _chat(gateway, name).parse()
    chat_chunks = list(
        gateway.chat.completions.create(
            model=name, messages=CHAT, max_tokens=8, temperature=0.0, stream=True
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chat_chunks if c.choices)
    assert streamed == chat_whole.choices[0].message.content


@vllm_only
def test_specialist_differs_from_base_and_pinned_versions_are_served(
    gateway: openai.OpenAI,
    vllm_server: VllmServer,
    fresh_name: Callable[[str], str],
    register_demo: Callable[..., dict[str, Any]],
) -> None:
    name = fresh_name("fd-pin")
    register_demo(name, "1.0.0", index=0)
    register_demo(name, "1.1.0", index=1)

    def text(model: str) -> tuple[str, str]:
        raw = gateway.completions.with_raw_response.create(
            model=model, prompt=PROMPT, max_tokens=8, temperature=0.0
        )
        return raw.headers["x-himoe-served-model"], raw.parse().choices[0].text

    base_served, base = text(vllm_server.base_model)
    assert base_served == vllm_server.base_model
    active_served, active = text(name)
    pinned_served, pinned = text(f"{name}@1.1.0")
    assert active_served == f"{name}@1.0.0"  # the first version stays active until promoted
    assert pinned_served == f"{name}@1.1.0"
    assert active != base
    assert pinned != active
    assert text(f"{name}@1.0.0") == (f"{name}@1.0.0", active)


@vllm_only
def test_vllm_rejections_reach_the_client_in_openai_form(
    gateway: openai.OpenAI,
    fresh_name: Callable[[str], str],
    register_demo: Callable[..., dict[str, Any]],
) -> None:
    name = fresh_name("fd-reject")
    register_demo(name, "1.0.0")
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.completions.create(model=name, prompt=PROMPT, max_tokens=100_000)
    assert caught.value.status_code == 400
    assert caught.value.body is not None


def test_a_client_that_hangs_up_after_done_got_a_complete_answer(
    scripted: tuple[ScriptedVllm, ServedApp, ServedApp],
) -> None:
    _, _, plane = scripted
    client = openai.OpenAI(base_url=f"{plane.url}/v1", api_key="x", max_retries=0)
    with client:
        for _ in range(3):  # openai's client closes the connection right after [DONE]
            stream = client.completions.create(
                model="known", prompt="linger", max_tokens=2, stream=True
            )
            assert [c.choices[0].text for c in stream] == ["x"]
    metrics = httpx.get(f"{plane.url}/metrics").text
    assert value(metrics, "hi_moe_lora_requests_total", outcome="success") == 3
    assert value(metrics, "hi_moe_lora_requests_total", outcome="client_error") == 0
    assert value(metrics, "hi_moe_lora_requests_in_flight") == 0
