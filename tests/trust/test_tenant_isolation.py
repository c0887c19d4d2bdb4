"""Tenant isolation under adapter churn, on the session's real vLLM CPU stack.

Every answer must be computed with its own adapter. Six adapter versions with clearly different
weights (more than the stack's ``--max-loras 4`` slots and ``--max-cpu-loras`` cache) are
registered twice: as ``ref@…`` and as ``live@…`` (the same files, other names and
``lora_int_id``\\ s). The solo references are computed first, one request at a time, on the base
model and on every ``ref@…`` version. Then base-model requests and ``live@…`` requests, streamed
and not, run all at once: every ``live@…`` version is used for the first time there, so vLLM
asks our resolver for it and loads it into a slot while other requests decode.

Each mixed answer (greedy, float32, ``ignore_eos``) must equal its solo reference: the same
token ids and, token by token, the same log-probabilities within ``LOGPROB_TOLERANCE`` (float
noise of a different batch is ~1e-6; another adapter's weights move them by whole units). A
differing token is accepted only where the solo run had a near tie (its two best candidates
within the tolerance), and the failure message says when an answer equals another model's solo
answer exactly (a leak, not noise).
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import VllmServer
from tests.openai.live import register

PROMPTS = ("def fibonacci(n):", "The integral of x squared")
MAX_TOKENS = 32
LOGPROB_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Answer:
    """One greedy completion: token ids, their log-probabilities, the best-two gap per step."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top_gaps: tuple[float, ...]


def _token_id(token: str) -> int:
    # ``return_tokens_as_token_ids``: vLLM names every token ``token_id:<id>``
    return int(token.removeprefix("token_id:"))


def _gap(top: dict[str, float]) -> float:
    best = sorted(top.values(), reverse=True)
    return best[0] - best[1] if len(best) > 1 else float("inf")


def _answer(chunks: list[dict[str, Any]]) -> Answer:
    ids: list[int] = []
    logprobs: list[float] = []
    gaps: list[float] = []
    for chunk in chunks:
        for choice in chunk["choices"]:
            block = choice.get("logprobs") or {}
            ids += [_token_id(t) for t in block.get("tokens") or []]
            logprobs += block.get("token_logprobs") or []
            gaps += [_gap(top) for top in block.get("top_logprobs") or []]
    return Answer(tuple(ids), tuple(logprobs), tuple(gaps))


def complete(client: httpx.Client, model: str, prompt: str, *, stream: bool) -> Answer:
    """A greedy completion through the front door (streamed or not)."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "logprobs": 2,
        "ignore_eos": True,
        "return_tokens_as_token_ids": True,
        "stream": stream,
    }
    if not stream:
        response = client.post("/v1/completions", json=body)
        assert response.status_code == 200, response.text
        return _answer([response.json()])
    chunks: list[dict[str, Any]] = []
    with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line.removeprefix("data: ")))
    return _answer(chunks)


def difference(got: Answer, solo: Answer, others: dict[str, Answer]) -> str | None:
    """Why ``got`` is not ``solo`` served again (None: it is, up to float noise)."""
    if len(got.token_ids) != len(solo.token_ids):
        return f"{len(got.token_ids)} tokens instead of {len(solo.token_ids)}"
    diverged = next(
        (i for i, (a, b) in enumerate(zip(got.token_ids, solo.token_ids, strict=True)) if a != b),
        None,
    )
    compared = len(solo.token_ids) if diverged is None else diverged
    for i in range(compared):
        delta = abs(got.logprobs[i] - solo.logprobs[i])
        if delta > LOGPROB_TOLERANCE:
            return f"log-probability of token {i} differs by {delta:.3g}"
    if diverged is None:
        return None
    same_as = sorted(name for name, other in others.items() if other.token_ids == got.token_ids)
    if same_as:
        return f"tokens equal the solo answer of {same_as} (another model's weights)"
    if solo.top_gaps[diverged] <= LOGPROB_TOLERANCE:
        return None  # a near tie that the batch's float noise flipped
    return f"token {diverged} differs (solo best-two gap {solo.top_gaps[diverged]:.3g})"


# ------------------------------------------------------------------ the comparison itself


def test_difference_tells_noise_from_leaks() -> None:
    solo = Answer((5, 6, 7), (-0.1, -0.2, -0.3), (2.0, 1e-5, 3.0))
    other = Answer((5, 9, 9), (-0.1, -4.0, -4.0), (2.0, 2.0, 2.0))
    noisy = Answer((5, 6, 7), (-0.1 + 1e-6, -0.2, -0.3 - 1e-6), (2.0, 1e-5, 3.0))
    flipped = Answer((5, 8, 1), (-0.1, -0.2, -5.0), (2.0, 2.0, 2.0))
    assert difference(noisy, solo, {"other": other}) is None
    assert difference(flipped, solo, {"other": other}) is None  # near tie at token 1
    assert difference(other, solo, {"other": other}) is not None
    assert "other" in (difference(other, solo, {"other": other}) or "")
    shifted = Answer((5, 6, 7), (-0.1, -0.5, -0.3), (2.0, 1e-5, 3.0))
    assert "token 1" in (difference(shifted, solo, {}) or "")
    solid = Answer((5, 6, 7), (-0.1, -0.2, -0.3), (2.0, 2.0, 3.0))
    assert "token 1 differs" in (difference(flipped, solid, {}) or "")
    assert difference(Answer((5,), (-0.1,), (2.0,)), solo, {}) is not None


# ------------------------------------------------------------------ on real vLLM


@pytest.fixture
def front_door(vllm_server: VllmServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=vllm_server.control_plane_url, timeout=300) as client:
        yield client


@pytest.mark.vllm
def test_every_answer_is_computed_with_its_own_adapter_under_churn(
    vllm_server: VllmServer,
    churn_adapters: list[Path],
    front_door: httpx.Client,
    fresh_name: Any,
) -> None:
    ref, live = fresh_name("ref"), fresh_name("live")
    versions = [f"1.{index}.0" for index in range(len(churn_adapters))]
    for version, source in zip(versions, churn_adapters, strict=True):
        register(vllm_server.control_plane_url, ref, version, source)
        register(vllm_server.control_plane_url, live, version, source)
    base = vllm_server.base_model

    # solo references: one request at a time, the base model and every ``ref@`` version
    solo: dict[tuple[str, str], Answer] = {}
    for prompt in PROMPTS:
        for key, model in [(base, base)] + [(v, f"{ref}@{v}") for v in versions]:
            solo[key, prompt] = complete(front_door, model, prompt, stream=False)
    for prompt in PROMPTS:  # the adapters really are told apart by their answers
        distinct = {solo[key, p].token_ids for key, p in solo if p == prompt}
        assert len(distinct) == len(versions) + 1, "two models answer alike: cannot tell them apart"

    # the mix: base-model requests and first uses of every ``live@`` version, all at once
    jobs = [
        (key, model, prompt, stream)
        for prompt in PROMPTS
        for key, model in [(base, base)] + [(v, f"{live}@{v}") for v in versions]
        for stream in (True, False)
    ]
    random.Random(21).shuffle(jobs)
    # base-model streams start first, so the loads happen while they decode
    jobs.sort(key=lambda job: job[0] != base)
    start = threading.Barrier(len(jobs))

    def run(job: tuple[str, str, str, bool]) -> Answer:
        _, model, prompt, stream = job
        start.wait()
        if model != base:
            threading.Event().wait(0.02 * jobs.index(job))  # staggered first uses
        return complete(front_door, model, prompt, stream=stream)

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        answers = list(pool.map(run, jobs))

    failures = []
    for (key, model, prompt, stream), answer in zip(jobs, answers, strict=True):
        others = {k: a for (k, p), a in solo.items() if p == prompt and k != key}
        why = difference(answer, solo[key, prompt], others)
        if why is not None:
            failures.append(f"{model} on {prompt!r} (stream={stream}): {why}")
    assert not failures, "\n".join(failures)
