"""The control plane's own overhead per OpenAI request, measured side by side.

Starts a FAKE UPSTREAM (``fake_upstream.py``, a stand-in for vLLM that answers instantly) and the
real control plane (SQLite, migrated, one registered adapter) pointed at it, then sends the same
completion request alternately straight to the fake upstream and through the control plane, over
keep-alive connections, and compares the latencies measured in the same run.

Run: ``.venv/bin/python -m benchmarks.frontdoor.overhead [--requests 2000]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.frontdoor import fake_upstream
from benchmarks.stats import percentile
from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.app.processes import free_port
from hi_moe_lora.tinymodel import TinyAdapterSpec, build_fleet

REPO_ROOT = Path(__file__).resolve().parents[2]


def _timed_post(client: httpx.Client, body: dict[str, object]) -> float:
    started = time.perf_counter()
    response = client.post("/v1/completions", json=body)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed * 1000.0


def measure(requests: int, workdir: Path) -> list[tuple[str, list[float], list[float]]]:
    fleet = build_fleet(
        REPO_ROOT / ".cache" / "tiny-fleet",
        adapters={"python-lora-1.0.0": TinyAdapterSpec(rank=8, seed=11)},
    )
    fake_port = free_port()
    fake = fake_upstream.start(fake_port, workdir / "fake-upstream.log")
    stack = EmbeddedStack(workdir=workdir / "stack", model_dir=fleet.model_dir, vllm_port=fake_port)
    try:
        fake.wait_http_ok(f"http://127.0.0.1:{fake_port}/health", 30)
        stack.migrate()
        stack.start_control_plane()
        with httpx.Client(base_url=stack.control_plane_url, timeout=30) as admin:
            admin.post(
                "/admin/v1/adapters/python-lora/versions",
                json={"version": "1.0.0", "source": str(fleet.adapters["python-lora-1.0.0"])},
            ).raise_for_status()
        direct = httpx.Client(base_url=f"http://127.0.0.1:{fake_port}", timeout=30)
        proxied = httpx.Client(base_url=stack.control_plane_url, timeout=30)
        cases = [
            ("specialist name -> name@version", "python-lora", "python-lora@1.0.0"),
            ("base model, passed through", str(fleet.model_dir), str(fleet.model_dir)),
        ]
        results = []
        with direct, proxied:
            for label, via_model, direct_model in cases:
                body_via = {"model": via_model, "prompt": "def f(x):", "max_tokens": 1}
                body_direct = {**body_via, "model": direct_model}
                for _ in range(50):  # warm-up: connections, caches, first-request paths
                    _timed_post(direct, body_direct)
                    _timed_post(proxied, body_via)
                direct_ms: list[float] = []
                proxied_ms: list[float] = []
                for index in range(requests):
                    if index % 2:
                        direct_ms.append(_timed_post(direct, body_direct))
                        proxied_ms.append(_timed_post(proxied, body_via))
                    else:
                        proxied_ms.append(_timed_post(proxied, body_via))
                        direct_ms.append(_timed_post(direct, body_direct))
                results.append((label, direct_ms, proxied_ms))
        return results
    finally:
        stack.stop()
        fake.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hml-overhead-") as tmp:
        results = measure(args.requests, Path(tmp))
    print(f"\n{args.requests} requests per path, alternating, keep-alive, one client at a time\n")
    print(
        "| request | direct p50 ms | via control plane p50 ms | added p50 ms | added p90 ms "
        "| ratio p50 |"
    )
    print("|---|---|---|---|---|---|")
    for label, direct_ms, proxied_ms in results:
        added = [p - d for p, d in zip(proxied_ms, direct_ms, strict=True)]
        d50, p50 = statistics.median(direct_ms), statistics.median(proxied_ms)
        print(
            f"| {label} | {d50:.3f} | {p50:.3f} | {statistics.median(added):.3f} | "
            f"{percentile(added, 0.9):.3f} | {p50 / d50:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
