"""The front-door load benchmark's client: closed-loop concurrent requests, timed per byte.

``concurrency`` workers each send the same ``POST`` again and again for ``seconds`` over their
own keep-alive connection, and record, per request, the time to the first body byte (TTFB), the
gaps between the body chunks that follow (for server-sent events: between tokens) and the total
time. Requests that start during the first ``warmup_s`` seconds are not recorded. A non-200
answer, a transport error or a stream without ``data: [DONE]`` counts as an error.

Run as its own process (``load.py`` does), so that its CPU is not the server's: reads one JSON
job on stdin, writes one JSON result on stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

STREAM_END = b"data: [DONE]"


@dataclass
class Job:
    url: str
    body: dict[str, Any]
    concurrency: int
    seconds: float
    warmup_s: float = 1.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Samples:
    ttfb_ms: list[float] = field(default_factory=list)
    gap_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    requests: int = 0
    errors: int = 0
    first_error: str | None = None
    measured_s: float = 0.0


async def _one(
    session: aiohttp.ClientSession, job: Job, payload: bytes, stream: bool
) -> tuple[float, list[float], float]:
    started = time.perf_counter()
    async with session.post(job.url, data=payload, headers=job.headers) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {(await response.read())[:200]!r}")
        first: float | None = None
        last = 0.0
        gaps: list[float] = []
        tail = b""
        async for chunk in response.content.iter_any():
            now = time.perf_counter()
            if first is None:
                first = now
            else:
                gaps.append((now - last) * 1000.0)
            last = now
            tail = (tail + chunk)[-64:]
        if first is None:
            raise RuntimeError("empty answer")
        if stream and STREAM_END not in tail:
            raise RuntimeError("stream ended without data: [DONE]")
        return (first - started) * 1000.0, gaps, (last - started) * 1000.0


async def _worker(
    session: aiohttp.ClientSession, job: Job, samples: Samples, record_from: float, until: float
) -> None:
    payload = json.dumps(job.body).encode()
    stream = job.body.get("stream") is True
    while time.perf_counter() < until:
        started = time.perf_counter()
        try:
            ttfb, gaps, total = await _one(session, job, payload, stream)
        except (aiohttp.ClientError, RuntimeError, asyncio.TimeoutError) as exc:
            if started >= record_from:
                samples.errors += 1
                samples.first_error = samples.first_error or f"{type(exc).__name__}: {exc}"
            continue
        if started >= record_from:
            samples.requests += 1
            samples.ttfb_ms.append(ttfb)
            samples.gap_ms.extend(gaps)
            samples.total_ms.append(total)


async def run(job: Job) -> Samples:
    samples = Samples()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        record_from = start + job.warmup_s
        until = record_from + job.seconds
        await asyncio.gather(
            *(_worker(session, job, samples, record_from, until) for _ in range(job.concurrency))
        )
        samples.measured_s = time.perf_counter() - record_from
    return samples


def main() -> int:
    job = Job(**json.load(sys.stdin))
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        pass
    samples = asyncio.run(run(job))
    json.dump(asdict(samples), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
