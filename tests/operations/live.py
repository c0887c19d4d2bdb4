"""Helpers of the operations tests: waiting on the control plane, reading its JSON and metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from hi_moe_lora.app.embedded import EmbeddedStack

T = TypeVar("T")


def eventually(read: Callable[[], T], done: Callable[[T], bool], timeout_s: float = 30.0) -> T:
    """``read()`` until ``done`` holds for its value; the last value if time runs out."""
    deadline = time.monotonic() + timeout_s
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.2)
        value = read()
    return value


def health(stack: EmbeddedStack) -> dict[str, Any]:
    answer = httpx.get(f"{stack.control_plane_url}/v1/health", timeout=30)
    answer.raise_for_status()
    result: dict[str, Any] = answer.json()
    return result


def adapter_health(stack: EmbeddedStack, served_name: str) -> dict[str, Any] | None:
    for upstream in health(stack)["upstreams"]:
        for adapter in upstream["adapters"]:
            if adapter["served_name"] == served_name:
                found: dict[str, Any] = adapter
                return found
    return None


def metrics_text(stack: EmbeddedStack) -> str:
    answer = httpx.get(f"{stack.control_plane_url}/metrics", timeout=30)
    answer.raise_for_status()
    return answer.text


def vllm_models(stack: EmbeddedStack) -> set[str]:
    answer = httpx.get(f"{stack.vllm_url}/v1/models", headers=stack.vllm_headers, timeout=30)
    answer.raise_for_status()
    return {card["id"] for card in answer.json()["data"]}
