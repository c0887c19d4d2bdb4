"""Does admin work starve serving? Inference latency idle vs. under 64 concurrent operators.

Starts a FAKE UPSTREAM (``benchmarks/frontdoor/fake_upstream.py``, a stand-in for vLLM that
answers instantly: it isolates the control plane's own overhead and is never used to test
behaviour) and the real control plane (``hi-moe-lora serve``, SQLite, migrated) pointed at it.
One client sends ``/v1/completions`` requests one at a time through the front door (the
specialist ``served``, so each request is routed through the version table and recorded),
first with nothing else going on, then while 64 operators (asyncio tasks in another process, so
their client work is not charged to the measuring client) hammer the admin API: registrations
(a rank-64 adapter: copy, validation and sha256 of every byte), promotions and listings.
Idle and loaded phases alternate (``--rounds``) so that both see the same machine.

Run: ``.venv/bin/python -m benchmarks.trust.operators [--requests 400] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from multiprocessing.synchronize import Event
from pathlib import Path

import httpx

from benchmarks.frontdoor import fake_upstream
from benchmarks.stats import percentile
from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.app.processes import free_port
from hi_moe_lora.tinymodel import TinyAdapterSpec, build_fleet

REPO_ROOT = Path(__file__).resolve().parents[2]
OPERATORS = 64
#: The adapters the operators register: the largest rank the stack accepts, every projection.
HEAVY = {f"heavy-{seed}": TinyAdapterSpec(rank=64, alpha=64, seed=300 + seed) for seed in range(2)}
SERVED = {"python-lora-1.0.0": TinyAdapterSpec(rank=8, seed=11)}


async def _operator(
    client: httpx.AsyncClient,
    seed: int,
    sources: list[str],
    versions: itertools.count[int],
    seen: Counter[str],
    operations: tuple[str, ...],
) -> None:
    rng = random.Random(seed)
    name = f"ops-{seed % 4}"
    mine: list[str] = []
    while True:
        kind = rng.choice(operations) if mine else "register"
        if kind == "register":
            version = f"{os.getpid()}.{next(versions)}.0"  # unique across rounds
            body = {"version": version, "source": rng.choice(sources)}
            response = await client.post(f"/admin/v1/adapters/{name}/versions", json=body)
            if response.status_code == 201:
                mine.append(version)
        elif kind == "promote":
            version = rng.choice(mine)
            response = await client.post(f"/admin/v1/adapters/{name}/versions/{version}/promote")
        else:
            response = await client.get("/admin/v1/adapters")
        seen[f"{kind} {response.status_code}"] += 1


async def _hammer(url: str, sources: list[str], stop: Event, operations: tuple[str, ...]) -> None:
    seen: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=OPERATORS, max_keepalive_connections=OPERATORS)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        versions = itertools.count()
        tasks = [
            asyncio.create_task(_operator(client, seed, sources, versions, seen, operations))
            for seed in range(OPERATORS)
        ]
        await asyncio.to_thread(stop.wait)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    print("operators' answers:", ", ".join(f"{k}: {v}" for k, v in sorted(seen.items())))


def hammer(
    url: str, sources: list[str], stop: Event, ready: Event, operations: tuple[str, ...]
) -> None:
    """The operators' process: runs until ``stop`` is set (each operator first registers)."""
    ready.set()
    asyncio.run(_hammer(url, sources, stop, operations))


def _timed(client: httpx.Client, model: str) -> float:
    started = time.perf_counter()
    response = client.post(
        "/v1/completions", json={"model": model, "prompt": "def f(x):", "max_tokens": 1}
    )
    elapsed = (time.perf_counter() - started) * 1000.0
    response.raise_for_status()
    return elapsed


def timed_requests(
    proxied: httpx.Client, direct: httpx.Client, count: int
) -> tuple[list[float], list[float]]:
    """``count`` requests through the front door and as many straight to the fake upstream,
    alternating: the direct ones show what the machine itself does to latency meanwhile."""
    via: list[float] = []
    straight: list[float] = []
    for _ in range(count):
        via.append(_timed(proxied, "served"))
        straight.append(_timed(direct, "served@1.0.0"))
    return via, straight


def admin_tally(url: str) -> tuple[int, int]:
    """(versions registered by the operators, adapters) as the registry lists them."""
    adapters = httpx.get(f"{url}/admin/v1/adapters", timeout=60).json()["adapters"]
    ops = [a for a in adapters if a["name"].startswith("ops-")]
    return sum(len(a["versions"]) for a in ops), len(ops)


def measure(
    requests: int, rounds: int, workdir: Path, operations: tuple[str, ...]
) -> dict[str, list[float]]:
    fleet = build_fleet(REPO_ROOT / ".cache" / "tiny-fleet", adapters={**SERVED, **HEAVY})
    fake_port = free_port()
    fake = fake_upstream.start(fake_port, workdir / "fake-upstream.log")
    stack = EmbeddedStack(
        workdir=workdir / "stack",
        model_dir=fleet.model_dir,
        vllm_port=fake_port,
        health_checks=False,
        warmup=False,
    )
    results: dict[str, list[float]] = {
        "idle": [],
        "64 operators": [],
        "idle, direct": [],
        "64 operators, direct": [],
    }
    try:
        fake.wait_http_ok(f"http://127.0.0.1:{fake_port}/health", 30)
        stack.migrate()
        stack.start_control_plane()
        url = stack.control_plane_url
        source = str(fleet.adapters["python-lora-1.0.0"])
        httpx.post(
            f"{url}/admin/v1/adapters/served/versions",
            json={"version": "1.0.0", "source": source},
            timeout=60,
        ).raise_for_status()
        heavy = [str(fleet.adapters[key]) for key in HEAVY]
        context = multiprocessing.get_context("spawn")
        direct = httpx.Client(base_url=f"http://127.0.0.1:{fake_port}", timeout=60)
        with httpx.Client(base_url=url, timeout=60) as client, direct:
            timed_requests(client, direct, 50)  # warm-up: connections, first-request paths
            for _ in range(rounds):
                via, straight = timed_requests(client, direct, requests)
                results["idle"] += via
                results["idle, direct"] += straight
                stop, ready = context.Event(), context.Event()
                process = context.Process(target=hammer, args=(url, heavy, stop, ready, operations))
                process.start()
                ready.wait(60)
                time.sleep(2.0)  # let the 64 operators get going
                via, straight = timed_requests(client, direct, requests)
                results["64 operators"] += via
                results["64 operators, direct"] += straight
                stop.set()
                process.join(60)
        registered, adapters = admin_tally(url)
        print(f"operators registered {registered} versions of {adapters} adapters in all")
        return results
    finally:
        stack.stop()
        fake.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="per phase and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--operations",
        default="register,register,promote,list",
        help="what each operator picks from, uniformly (repeat a name to weight it)",
    )
    args = parser.parse_args()
    operations = tuple(args.operations.split(","))
    with tempfile.TemporaryDirectory(prefix="hml-operators-") as tmp:
        results = measure(args.requests, args.rounds, Path(tmp), operations)
    baseline = {
        phase: statistics.median(results[phase.replace("64 operators", "idle")])
        for phase in results
    }
    print(f"\n{args.requests} requests per phase x {args.rounds} rounds, one client, keep-alive\n")
    print(
        "| phase (direct: to the fake upstream, not through us) | requests | p50 ms | p99 ms "
        "| p50 / idle p50 |"
    )
    print("|---|---|---|---|---|")
    for phase, latencies in results.items():
        p50 = statistics.median(latencies)
        print(
            f"| {phase} | {len(latencies)} | {p50:.2f} | {percentile(latencies, 0.99):.2f} | "
            f"{p50 / baseline[phase]:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
