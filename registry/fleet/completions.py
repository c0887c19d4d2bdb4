"""One greedy completion sent straight to one replica: what probes and warm-ups send.

Not the front door's path (no routing, no statistics, no metrics of user traffic): the health
monitor compares adapters' output with the base model's, warm-up makes vLLM load a version.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from registry.fleet.upstreams import Replica, UpstreamPool, UpstreamUnavailable


@dataclass(frozen=True)
class Completion:
    """``text`` (``None`` when it failed, then ``problem`` says why) and the time it took."""

    text: str | None
    problem: str | None
    elapsed_ms: float


async def greedy_completion(
    upstreams: UpstreamPool,
    replica: Replica,
    model: str,
    prompt: str,
    *,
    max_tokens: int,
    timeout_s: float,
) -> Completion:
    """``POST /v1/completions`` with temperature 0 on ``replica``; never raises."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    started = time.perf_counter()

    def elapsed_ms() -> float:
        return round((time.perf_counter() - started) * 1000.0, 2)

    try:
        response = await upstreams.send_to(
            replica, "POST", "/v1/completions", json_body=body, timeout_s=timeout_s
        )
    except UpstreamUnavailable as exc:
        return Completion(None, exc.message, elapsed_ms())
    if response.status_code != 200:
        return Completion(None, response.failure(), elapsed_ms())
    try:
        text = response.json()["choices"][0]["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        return Completion(None, "the completion has no choices[0].text", elapsed_ms())
    return Completion(str(text), None, elapsed_ms())
