"""vLLM killed (SIGKILL of its whole process group) in the middle of a stream, and started
again: the stream ends with an error event and a clean close, requests fail fast while it is
gone, the control plane keeps serving the rest, and it recovers by itself."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import pytest

from hi_moe_lora.tinymodel import TinyFleet
from tests.faults.conftest import PostgresStack, demo_adapter
from tests.openai.live import register
from tests.operations.live import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.postgres]

#: connection refused is immediate; the upstream connect timeout (3 s) bounds the rest
FAIL_FAST_S = 5.0


#: Tokens of the stream that vLLM is killed in: all the tiny model's context allows, so that
#: vLLM cannot finish it before the kill lands (at 480, on a loaded 2-core CI machine, it once
#: did: the stream ended with [DONE]).
LONG = 1000


def body(model: str, *, stream: bool, max_tokens: int) -> dict[str, object]:
    return {
        "model": model,
        "prompt": "def add(a, b):",
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }


def kill_vllm(stack: PostgresStack) -> None:
    """SIGKILL vLLM's process group (API server, engine core, workers) as a crash would."""
    (process,) = [p for p in stack._processes if p.name == "vLLM"]
    assert process.pid is not None
    os.killpg(process.pid, signal.SIGKILL)


def _stream_killed_midway(client: httpx.Client, stack: PostgresStack) -> list[str]:
    """The events of a long stream during which vLLM is killed, once its first token is out."""
    events: list[str] = []
    with client.stream(
        "POST", "/v1/completions", json=body("kill-spec", stream=True, max_tokens=LONG)
    ) as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        for line in lines:  # the first token is out: vLLM is generating
            if line.startswith("data: "):
                events.append(line)
                break
        kill_vllm(stack)
        events.extend(line for line in lines if line.startswith("data: "))  # closes cleanly
    return events


def _restart(client: httpx.Client, stack: PostgresStack) -> None:
    stack.stop_vllm()  # reap what is left of the killed process group
    stack.start_vllm()
    ready = eventually(lambda: client.get("/readyz").status_code, lambda s: s == 200, 60)
    assert ready == 200


def test_vllm_killed_mid_stream_then_restarted(
    faults_stack: PostgresStack, tiny_fleet: TinyFleet
) -> None:
    url = faults_stack.control_plane_url
    register(url, "kill-spec", "1.0.0", demo_adapter(tiny_fleet))
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.post("/v1/completions", json=body("kill-spec", stream=False, max_tokens=2))
        events = _stream_killed_midway(client, faults_stack)
        if "data: [DONE]" in events:  # vLLM finished before the kill landed: once more
            _restart(client, faults_stack)
            events = _stream_killed_midway(client, faults_stack)
        assert "data: [DONE]" not in events
        error = json.loads(events[-1].removeprefix("data: "))["error"]
        assert error["type"] == "server_error"
        assert len(events) < LONG  # cut short, not a complete answer

        # while vLLM is gone: fast OpenAI-style errors; everything else keeps answering
        for _ in range(3):
            started = time.monotonic()
            answer = client.post(
                "/v1/completions", json=body("kill-spec", stream=False, max_tokens=2)
            )
            assert answer.status_code in (502, 503), answer.text
            assert answer.json()["error"]["code"] == "upstream_unavailable"
            assert time.monotonic() - started < FAIL_FAST_S
        assert client.get("/healthz").status_code == 200
        assert client.get("/admin/v1/adapters/kill-spec").status_code == 200
        status = eventually(lambda: client.get("/readyz").status_code, lambda s: s == 503)
        assert status == 503  # the health monitor saw it go
        faults_stack.stop_vllm()  # reap what is left of the killed process group

        faults_stack.start_vllm()
        ready = eventually(lambda: client.get("/readyz").status_code, lambda s: s == 200, 60)
        assert ready == 200  # seen up again by the health monitor, no restart of ours
        for model in ("kill-spec", "kill-spec@1.0.0"):  # vLLM loads the adapter afresh
            answer = client.post("/v1/completions", json=body(model, stream=False, max_tokens=2))
            assert answer.status_code == 200, answer.text
        with client.stream(
            "POST", "/v1/completions", json=body("kill-spec", stream=True, max_tokens=8)
        ) as stream:
            tail = [line for line in stream.iter_lines() if line.startswith("data: ")]
        assert tail[-1] == "data: [DONE]"
