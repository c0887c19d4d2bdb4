"""Fixtures of the front-door tests: clients of the session's stack and fresh adapter names."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import VllmServer
from tests.openai.live import register

_counter = itertools.count()


@pytest.fixture
def fresh_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Adapter names no other test of the session uses (the stack's registry is shared)."""

    def make(prefix: str) -> str:
        return f"{prefix}-{next(_counter)}"

    return make


@pytest.fixture
def gateway(vllm_server: VllmServer) -> Iterator[openai.OpenAI]:
    """The stock ``openai`` client pointed at the control plane's front door."""
    client = openai.OpenAI(
        base_url=f"{vllm_server.control_plane_url}/v1", api_key="unused", max_retries=0, timeout=120
    )
    yield client
    client.close()


@pytest.fixture
def direct(vllm_server: VllmServer) -> Iterator[openai.OpenAI]:
    """The stock ``openai`` client pointed at vLLM itself (bypassing the control plane)."""
    client = openai.OpenAI(
        base_url=f"{vllm_server.url}/v1", api_key="unused", max_retries=0, timeout=120
    )
    yield client
    client.close()


@pytest.fixture
def admin(vllm_server: VllmServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{vllm_server.control_plane_url}/admin/v1", timeout=60) as client:
        yield client


@pytest.fixture
def register_demo(vllm_server: VllmServer) -> Callable[..., dict[str, Any]]:
    """Register the stack's demo adapter ``kind`` (``python-lora``, …) version ``index``."""

    def do(name: str, version: str, kind: str = "python-lora", index: int = 0) -> dict[str, Any]:
        source: Path = vllm_server.adapters[kind][index]
        return register(vllm_server.control_plane_url, name, version, source)

    return do
