"""Graceful shutdown of a real ``hi-moe-lora serve`` process under real signals: streams in
flight finish within ``SHUTDOWN_GRACE_S`` (and are cut past it), buffered statistics are
written before it exits, and a registration killed half way leaves no artifact behind (its
staging copy is removed at the next start).

vLLM is played by a scripted server that streams slowly (the control plane is under test here,
and a real vLLM answers a short stream faster than a signal can be placed inside it).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hi_moe_lora.app.processes import free_port
from tests.openai.live import ServedApp
from tests.support.adapter_files import write_adapter

BASE = "scripted-base"
CHUNK_S = 0.1
#: uvicorn, once shut down cleanly, re-raises the signal it caught: the exit status says SIGTERM
CLEAN_EXIT = (0, -signal.SIGTERM)


def scripted_vllm() -> Starlette:
    """``/v1/models`` and a ``/v1/completions`` stream of ``max_tokens`` events, one per 0.1 s."""

    async def models(_request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": BASE, "object": "model"}]})

    async def completions(request: Request) -> Response:
        count = int((await request.json())["max_tokens"])

        async def events() -> AsyncIterator[bytes]:
            for index in range(count):
                await asyncio.sleep(CHUNK_S)
                chunk = {
                    "object": "text_completion",
                    "choices": [{"index": 0, "text": f" {index}"}],
                }
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/v1/models", models),
            Route("/v1/completions", completions, methods=["POST"]),
        ]
    )


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    served = ServedApp(scripted_vllm()).start()
    try:
        yield served.url
    finally:
        served.stop()


class Serve:
    """``python -m hi_moe_lora.app.cli serve --migrate`` on SQLite under ``workdir``."""

    def __init__(self, workdir: Path, upstream: str, grace_s: float) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database = workdir / "registry.db"
        self.artifacts = workdir / "artifacts"
        self.env = {
            **os.environ,
            "HI_MOE_LORA_DATABASE_URL": f"sqlite:///{self.database}",
            "HI_MOE_LORA_ARTIFACT_DIR": str(self.artifacts),
            "HI_MOE_LORA_SOURCE_ROOTS": json.dumps([str(workdir)]),
            "HI_MOE_LORA_VLLM_URLS": json.dumps([upstream]),
            "HI_MOE_LORA_BASE_MODEL": BASE,
            "HI_MOE_LORA_PORT": str(self.port),
            "HI_MOE_LORA_SHUTDOWN_GRACE_S": str(grace_s),
            "HI_MOE_LORA_HEALTH_CHECKS": "false",
            "HI_MOE_LORA_WARMUP": "false",
            "HI_MOE_LORA_DISPATCH_EMBEDDINGS": "false",
        }
        self.log = workdir / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Serve:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "hi_moe_lora.app.cli", "serve", "--migrate"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"serve did not start:\n{self.log.read_text()}")

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@pytest.fixture
def serve(tmp_path: Path, upstream: str) -> Iterator[Serve]:
    server = Serve(tmp_path, upstream, grace_s=30)
    try:
        yield server
    finally:
        server.kill()


def stream_events(url: str, max_tokens: int, first: threading.Event, out: list[str]) -> None:
    body = {"model": BASE, "prompt": "p", "max_tokens": max_tokens, "stream": True}
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as answer:
            out.append(answer.headers["X-HiMoE-Request-Id"])
            for line in answer.iter_lines():
                if line.startswith("data: "):
                    out.append(line)
                    first.set()
    except httpx.TransportError as exc:
        out.append(f"transport error: {type(exc).__name__}")
    finally:
        first.set()


def test_sigterm_lets_a_stream_finish_then_writes_its_outcome_and_exits(serve: Serve) -> None:
    serve.start()
    first, events = threading.Event(), []
    client = threading.Thread(target=stream_events, args=(serve.url, 20, first, events))
    client.start()
    assert first.wait(30)
    serve.signal(signal.SIGTERM)
    time.sleep(0.3)
    with pytest.raises(httpx.TransportError):  # no new requests once it is stopping
        httpx.get(f"{serve.url}/healthz", timeout=2)
    client.join(30)
    assert serve.wait(30) in CLEAN_EXIT
    assert "Application shutdown complete" in serve.log.read_text()
    request_id, *data = events
    assert data[-1] == "data: [DONE]"
    assert len(data) == 21  # every token, nothing cut
    with sqlite3.connect(serve.database) as db:
        rows = db.execute(
            "SELECT served_name FROM request_records WHERE request_id = ?", (request_id,)
        ).fetchall()
    assert rows == [(BASE,)]  # the buffered outcome was written before the exit


def test_a_stream_longer_than_the_grace_period_is_cut_and_the_process_exits(
    tmp_path: Path, upstream: str
) -> None:
    server = Serve(tmp_path, upstream, grace_s=1).start()
    try:
        first, events = threading.Event(), []
        client = threading.Thread(target=stream_events, args=(server.url, 300, first, events))
        client.start()  # 30 s of tokens
        assert first.wait(30)
        signalled = time.monotonic()
        server.signal(signal.SIGTERM)
        assert server.wait(15) in CLEAN_EXIT
        assert time.monotonic() - signalled < 6  # the grace period, not the stream's 30 s
        client.join(30)
        assert "data: [DONE]" not in events
    finally:
        server.kill()


def test_a_registration_killed_half_way_leaves_no_artifact(tmp_path: Path, serve: Serve) -> None:
    serve.start()
    source = write_adapter(tmp_path / "big")
    with (source / "adapter_model.safetensors").open("r+b") as weights:
        weights.truncate(1 << 30)  # a 1 GiB weights file: the copy takes a while
    result: list[httpx.Response | Exception] = []

    def register() -> None:
        try:
            result.append(
                httpx.post(
                    f"{serve.url}/admin/v1/adapters/big-lora/versions",
                    json={"version": "1.0.0", "source": str(source)},
                    timeout=120,
                )
            )
        except httpx.TransportError as exc:
            result.append(exc)

    caller = threading.Thread(target=register)
    caller.start()
    staging = serve.artifacts / ".staging"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        copies = list(staging.glob("*/adapter_model.safetensors")) if staging.exists() else []
        if copies and copies[0].stat().st_size > 0:
            break
        time.sleep(0.005)
    else:
        pytest.fail("the registration never started copying")
    serve.kill()  # SIGKILL mid-copy: a crash
    caller.join(30)
    assert isinstance(result[0], httpx.TransportError)
    assert not (serve.artifacts / "big-lora").exists()  # nothing published
    assert list(staging.iterdir())  # the half copy is left behind by the crash
    with sqlite3.connect(serve.database) as db:
        assert db.execute("SELECT count(*) FROM adapters").fetchone() == (0,)

    serve.start()  # the next start removes it
    assert list(staging.iterdir()) == []
    assert httpx.get(f"{serve.url}/admin/v1/adapters/big-lora", timeout=10).status_code == 404
    assert "staging leftover" in serve.log.read_text()
