"""Two real vLLM (CPU) replicas that share no artifact directory, behind one control plane.

Each replica runs in a mount namespace of its own where the control plane's artifact directory
is an empty tmpfs (:attr:`EmbeddedStack.private_artifacts`): its resolver plugin must download
every version it serves from the control plane into its own cache, verify it, and hand vLLM
that path. The control plane routes with adapter affinity: requests for a version concentrate
on the replica that loaded it; when that replica is stopped they move to the other one (which
downloads the version in turn), and when it is back, requests routed home reach it again.

Module-scoped: the two vLLMs start once (side by side) for all the tests here; they run in the
order written. Warm-up is off, so that only requests decide where a version is loaded.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.app.processes import ProcessStartError
from hi_moe_lora.tinymodel import TinyFleet
from registry.fleet.routing import rendezvous_score
from tests.metrics.scrape import value
from tests.openai.live import register
from tests.operations.live import eventually, health, metrics_text
from tests.support.stacks import StackWithoutTier3, stop_control_plane_first

HEALTH_INTERVAL_S = 2.0
PROMPT = "def fibonacci(n):"


@pytest.fixture(scope="module")
def fleet(
    tiny_fleet: TinyFleet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedStack]:
    # no model="auto" here: the control plane's tier 3 would only slow the replicas' start
    stack = StackWithoutTier3(
        workdir=tmp_path_factory.mktemp("two-replicas"),
        model_dir=tiny_fleet.model_dir,
        source_roots=[tiny_fleet.model_dir.parent],
        vllm_replicas=2,
        private_artifacts=True,
        health_interval_s=HEALTH_INTERVAL_S,
        warmup=False,
    )
    try:
        stack.start()
    except ProcessStartError as exc:
        if "needs unshare" in str(exc):
            pytest.skip(str(exc))
        raise
    try:
        yield stack
    finally:
        stop_control_plane_first(stack)  # tests/support/stacks.py: why


def _adapter(fleet_models: TinyFleet, kind: str) -> Path:
    return next(p for key, p in sorted(fleet_models.adapters.items()) if key.startswith(kind))


def _complete(stack: EmbeddedStack, model: str, n: int) -> None:
    with openai.OpenAI(
        base_url=f"{stack.control_plane_url}/v1", api_key="unused", max_retries=0, timeout=120
    ) as client:
        for _ in range(n):
            answer = client.completions.create(model=model, prompt=PROMPT, max_tokens=4)
            assert answer.choices[0].text is not None


def _routes(stack: EmbeddedStack) -> Counter[str]:
    text = metrics_text(stack)
    return Counter(
        {
            url: int(value(text, "hi_moe_lora_upstream_routes_total", upstream=url))
            for url in stack.vllm_urls
        }
    )


def _models(stack: EmbeddedStack, url: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/v1/models", headers=stack.vllm_headers, timeout=30)
    answer.raise_for_status()
    return {card["id"]: card for card in answer.json()["data"]}


def _home(stack: EmbeddedStack, served_name: str) -> str:
    return max(stack.vllm_urls, key=lambda url: rendezvous_score(served_name, url))


def _up(stack: EmbeddedStack, url: str) -> bool | None:
    for upstream in health(stack)["upstreams"]:
        if upstream["url"] == url:
            up: bool | None = upstream["up"]
            return up
    return None


@pytest.mark.vllm
def test_versions_download_verify_and_concentrate_on_the_replica_that_loaded_them(
    fleet: EmbeddedStack, tiny_fleet: TinyFleet
) -> None:
    register(fleet.control_plane_url, "hosts-python", "1.0.0", _adapter(tiny_fleet, "python-lora"))
    # a version whose home is the other replica, so that both replicas serve
    python_home = _home(fleet, "hosts-python@1.0.0")
    math = next(f"1.0.{i}" for i in range(64) if _home(fleet, f"hosts-math@1.0.{i}") != python_home)
    register(fleet.control_plane_url, "hosts-math", math, _adapter(tiny_fleet, "math-lora"))
    versions = {"hosts-python": "1.0.0", "hosts-math": math}
    distribution: dict[str, Counter[str]] = {}
    for name in versions:
        before = _routes(fleet)
        _complete(fleet, name, 6)
        distribution[name] = _routes(fleet) - before
    print("requests per replica:", {n: dict(d) for n, d in distribution.items()})
    assert len({next(iter(counts)) for counts in distribution.values()}) == 2
    for name, counts in distribution.items():
        served = f"{name}@{versions[name]}"
        assert counts == Counter({_home(fleet, served): 6}), (name, counts)
        # loaded only there, from that replica's own download cache
        holder = _home(fleet, served)
        cache = fleet.artifact_cache_dir(fleet.vllm_urls.index(holder))
        assert cache is not None
        for url in fleet.vllm_urls:
            cards = _models(fleet, url)
            if url == holder:
                assert str(cards[served]["root"]).startswith(str(cache)), cards[served]
            else:
                assert served not in cards


@pytest.mark.vllm
def test_traffic_moves_when_a_replica_stops_and_returns_when_it_is_back(
    fleet: EmbeddedStack, tiny_fleet: TinyFleet
) -> None:
    served = "hosts-python@1.0.0"
    holder = _home(fleet, served)
    index = fleet.vllm_urls.index(holder)
    other = next(url for url in fleet.vllm_urls if url != holder)
    fleet.stop_vllm(index)
    stopped = time.monotonic()
    before = _routes(fleet)
    _complete(fleet, "hosts-python", 4)  # no error: failed over, downloaded there
    moved = _routes(fleet) - before
    assert moved == Counter({other: 4}), moved
    assert served in _models(fleet, other)
    # out of rotation within one health interval (plus a probe's time)
    assert eventually(lambda: _up(fleet, holder), lambda up: up is False, timeout_s=30) is False
    assert time.monotonic() - stopped < HEALTH_INTERVAL_S + 30

    fleet.start_vllm(index)
    assert eventually(lambda: _up(fleet, holder), lambda up: up is True, timeout_s=60) is True
    # the version stays where it is loaded now; a version whose home is the restarted replica
    # is served there again
    back = next(f"1.0.{i}" for i in range(64) if _home(fleet, f"hosts-back@1.0.{i}") == holder)
    register(fleet.control_plane_url, "hosts-back", back, _adapter(tiny_fleet, "python-lora"))
    before = _routes(fleet)
    _complete(fleet, "hosts-python", 3)
    assert _routes(fleet) - before == Counter({other: 3})
    before = _routes(fleet)
    _complete(fleet, f"hosts-back@{back}", 3)
    assert _routes(fleet) - before == Counter({holder: 3})
    # base-model requests go to the least busy replica: both serve again
    before = _routes(fleet)
    _complete(fleet, str(tiny_fleet.model_dir), 6)
    base = _routes(fleet) - before
    assert set(base) == set(fleet.vllm_urls), base
    # adapter requests went where their version was loaded (health probes load it at home
    # first), base-model ones by load
    text = metrics_text(fleet)
    assert value(text, "hi_moe_lora_upstream_routes_total", reason="loaded") >= 12
    assert value(text, "hi_moe_lora_upstream_routes_total", reason="least_outstanding") == 6
