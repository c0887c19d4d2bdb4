"""The OpenAI front door under load: added latency and throughput, side by side with the upstream.

Starts a FAKE UPSTREAM (``fake_upstream.py``: a stand-in for vLLM that paces tokens like a
decoder, so only our own overhead is measured; never used to test behaviour) and the real control
plane (``hi-moe-lora serve``, optionally ``--workers N``; SQLite, or a fresh PostgreSQL database
with ``--postgres``) in front of it, with one registered specialist.

1. **Latency under concurrency.** For each concurrency (default 1, 64 and 256 concurrent
   clients) and each mode (streamed and not), ``load_client.py`` (its own process) runs closed
   loops of the same completion request against three targets in turn: the upstream directly,
   the control plane naming the specialist (``python-lora`` → ``python-lora@1.0.0``), and the
   control plane with ``model="auto"`` (the dispatcher picks the specialist). Rounds alternate the
   order. Reported: time to first byte (TTFB), the gap between streamed chunks (tokens) and the
   whole request, p50 and p99, and what the control plane adds to each (its percentile minus the
   direct one, same round, same concurrency).
2. **Throughput.** The fake upstream is restarted to answer at once, and ``wrk`` (Debian's
   ``wrk``: a standard HTTP load generator written in C, so the client costs little CPU) sends
   non-streamed requests as fast as it can over 64 connections, directly and through the
   control plane, alternating. Reported: requests/s, wrk's latency percentiles, errors
   (non-2xx answers and socket errors).

Every process shares this machine's cores (2 on the development machines): client, control plane
and fake upstream compete, so compare rows of one run only. ``--pin`` gives the control plane a
core of its own (``taskset``: CPU 1; the client, wrk and the fake upstream share CPU 0, for the
direct rows as for the others), so that what it adds is its own work and not the others' CPU.

Run: ``.venv/bin/python -m benchmarks.frontdoor.load`` (``--help`` for the knobs; about 6 min
with the defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.frontdoor import fake_upstream
from hi_moe_lora.app.processes import ManagedProcess, free_port
from hi_moe_lora.tinymodel import TinyAdapterSpec, build_fleet
from registry.settings import ControlPlaneSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
SPECIALIST = "python-lora"
#: ``model="auto"``: an objective the keyword tier gives to the ``python`` domain.
AUTO_PROMPT = "Fix the failing pytest in utils.py: the Python function raises a TypeError"
TARGETS = ("direct", "specialist", "auto")


@dataclass
class Result:
    """One client run: a target at a concurrency, streamed or not."""

    target: str
    concurrency: int
    stream: bool
    round: int
    samples: dict[str, Any]

    def percentile(self, key: str, q: float) -> float:
        values: list[float] = sorted(self.samples[key])
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(q * len(values)))]

    @property
    def rate(self) -> float:
        measured_s: float = self.samples["measured_s"]
        return float(self.samples["requests"]) / max(measured_s, 1e-9)


@dataclass
class WrkResult:
    target: str
    connections: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    output: str = field(repr=False)


def _body(model: str, stream: bool, tokens: int) -> dict[str, Any]:
    prompt = AUTO_PROMPT if model == "auto" else "def add(a, b):"
    return {"model": model, "prompt": prompt, "max_tokens": tokens, "stream": stream}


def _client(
    url: str, body: dict[str, Any], concurrency: int, seconds: float, prefix: list[str]
) -> dict[str, Any]:
    job = {"url": url, "body": body, "concurrency": concurrency, "seconds": seconds}
    completed = subprocess.run(
        [*prefix, sys.executable, "-m", "benchmarks.frontdoor.load_client"],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=True,
    )
    samples: dict[str, Any] = json.loads(completed.stdout)
    return samples


def _wrk(
    url: str,
    body: dict[str, Any],
    connections: int,
    seconds: int,
    workdir: Path,
    prefix: list[str],
) -> WrkResult:
    script = workdir / "post.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = {json.dumps(json.dumps(body))}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    argv = [
        *prefix,
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{seconds}s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    output = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return WrkResult(
        target="",
        connections=connections,
        requests_per_s=float(_field(r"Requests/sec:\s+([\d.]+)", output)),
        p50_ms=_wrk_ms(_field(r"\s50%\s+(\S+)", output)),
        p99_ms=_wrk_ms(_field(r"\s99%\s+(\S+)", output)),
        errors=_wrk_errors(output),
        output=output,
    )


def _field(pattern: str, text: str) -> str:
    match = re.search(pattern, text)
    if match is None:
        raise RuntimeError(f"wrk output lacks {pattern!r}:\n{text}")
    return match.group(1)


def _wrk_ms(value: str) -> float:
    for unit, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0), ("m", 60000.0)):
        if value.endswith(unit):
            return float(value[: -len(unit)]) * factor
    raise RuntimeError(f"unknown wrk duration {value!r}")


def _wrk_errors(output: str) -> int:
    errors = 0
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    if non_2xx:
        errors += int(non_2xx.group(1))
    sockets = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    if sockets:
        errors += sum(int(n) for n in sockets.groups())
    return errors


@contextmanager
def _postgres_database(server_url: str) -> Iterator[str]:
    """A fresh database on ``server_url``'s server (dropped afterwards); yields its URL."""
    import sqlalchemy as sa

    name = f"hml_load_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield str(sa.make_url(server_url).set(database=name).render_as_string(hide_password=False))
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class Bench:
    """The processes of one run: fake upstream and control plane, on this machine."""

    def __init__(self, args: argparse.Namespace, workdir: Path, database_url: str) -> None:
        self.args = args
        self.workdir = workdir
        self.upstream_port = free_port()
        self.control_plane_port = free_port()
        self.upstream_url = f"http://127.0.0.1:{self.upstream_port}"
        self.control_plane_url = f"http://127.0.0.1:{self.control_plane_port}"
        fleet = build_fleet(
            REPO_ROOT / ".cache" / "tiny-fleet",
            adapters={"python-lora-1.0.0": TinyAdapterSpec(rank=8, seed=11)},
        )
        self.adapter_dir = fleet.adapters["python-lora-1.0.0"]
        self.settings = ControlPlaneSettings(
            database_url=database_url,
            artifact_dir=workdir / "artifacts",
            base_model=str(fleet.model_dir),
            source_roots=[fleet.model_dir.parent],
            vllm_urls=[self.upstream_url],
            host="127.0.0.1",
            port=self.control_plane_port,
            dispatch_embeddings=args.embeddings,
        )
        self.upstream: ManagedProcess | None = None
        self.control_plane: ManagedProcess | None = None
        #: command prefixes: the load's side (client, wrk, fake upstream) and the control plane's
        self.load_cpus = ["taskset", "-c", "0"] if args.pin else []
        self.control_plane_cpus = ["taskset", "-c", "1"] if args.pin else []

    def start_upstream(self, token_ms: float) -> None:
        if self.upstream is not None:
            self.upstream.stop()
        log = self.workdir / f"fake-upstream-{token_ms:g}ms.log"
        self.upstream = fake_upstream.start(
            self.upstream_port, log, token_ms=token_ms, prefix=self.load_cpus
        )
        self.upstream.wait_http_ok(f"{self.upstream_url}/health", 30)

    def start_control_plane(self) -> None:
        env = {**os.environ, **self.settings.to_env()}
        argv = [*self.control_plane_cpus, sys.executable, "-m", "hi_moe_lora.app.cli", "serve"]
        argv.append("--migrate")
        if self.args.workers > 1:
            argv += ["--workers", str(self.args.workers)]
        log = self.workdir / "control-plane.log"
        self.control_plane = ManagedProcess("control plane", argv, log, env=env).start()
        self.control_plane.wait_http_ok(f"{self.control_plane_url}/healthz", 120)
        with httpx.Client(base_url=self.control_plane_url, timeout=60) as admin:
            answer = admin.post(
                f"/admin/v1/adapters/{SPECIALIST}/versions",
                json={"version": "1.0.0", "source": str(self.adapter_dir), "domains": ["python"]},
            )
            if answer.status_code not in (200, 201, 409):
                raise RuntimeError(f"registration failed: {answer.status_code} {answer.text}")
            self._check_routes(admin)

    def _check_routes(self, client: httpx.Client) -> None:
        """Both front-door targets reach the specialist before anything is timed."""
        deadline = time.monotonic() + 60
        for model in (SPECIALIST, "auto"):
            while True:
                answer = client.post("/v1/completions", json=_body(model, False, 1))
                served = answer.headers.get("X-HiMoE-Served-Model")
                if answer.status_code == 200 and served == f"{SPECIALIST}@1.0.0":
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{model}: {answer.status_code} {served} {answer.text}")
                time.sleep(0.5)  # other workers may not have seen the new version yet

    def url(self, target: str) -> str:
        base = self.upstream_url if target == "direct" else self.control_plane_url
        return f"{base}/v1/completions"

    def model(self, target: str) -> str:
        return {"direct": f"{SPECIALIST}@1.0.0", "specialist": SPECIALIST, "auto": "auto"}[target]

    def stop(self) -> None:
        for process in (self.control_plane, self.upstream):
            if process is not None:
                process.stop()


def latency_phase(bench: Bench, args: argparse.Namespace) -> list[Result]:
    results: list[Result] = []
    bench.start_upstream(args.token_ms)
    for round_ in range(args.rounds):
        for concurrency in args.concurrency:
            for stream in (True, False):
                order = TARGETS if round_ % 2 == 0 else tuple(reversed(TARGETS))
                for target in order:
                    body = _body(bench.model(target), stream, args.tokens)
                    url = bench.url(target)
                    samples = _client(url, body, concurrency, args.seconds, bench.load_cpus)
                    result = Result(target, concurrency, stream, round_, samples)
                    results.append(result)
                    print(
                        f"  round {round_} c={concurrency:<3} {'stream' if stream else 'whole ':6} "
                        f"{target:10} {result.rate:8.1f} req/s  errors {samples['errors']}",
                        file=sys.stderr,
                        flush=True,
                    )
    return results


def throughput_phase(bench: Bench, args: argparse.Namespace) -> list[WrkResult]:
    results: list[WrkResult] = []
    bench.start_upstream(0.0)
    for round_ in range(args.rounds):
        order = TARGETS if round_ % 2 == 0 else tuple(reversed(TARGETS))
        for target in order:
            body = _body(bench.model(target), False, 1)
            result = _wrk(
                bench.url(target),
                body,
                args.wrk_connections,
                args.wrk_seconds,
                bench.workdir,
                bench.load_cpus,
            )
            result.target = target
            results.append(result)
            print(
                f"  wrk round {round_} {target:10} {result.requests_per_s:9.1f} req/s "
                f"p50 {result.p50_ms:.2f} ms p99 {result.p99_ms:.2f} ms errors {result.errors}",
                file=sys.stderr,
                flush=True,
            )
    return results


def _pooled(results: list[Result], target: str, concurrency: int, stream: bool) -> Result:
    """One result for a target: the rounds' samples together."""
    chosen = [
        r for r in results if (r.target, r.concurrency, r.stream) == (target, concurrency, stream)
    ]
    merged: dict[str, Any] = {"ttfb_ms": [], "gap_ms": [], "total_ms": []}
    merged.update(requests=0, errors=0, measured_s=0.0)
    for result in chosen:
        for key in ("ttfb_ms", "gap_ms", "total_ms"):
            merged[key] += result.samples[key]
        for key in ("requests", "errors", "measured_s"):
            merged[key] += result.samples[key]
    return Result(target, concurrency, stream, -1, merged)


def _added(row: Result, direct: Result, key: str) -> str:
    """What the control plane adds at p50 / p99 (``-`` for the direct row itself)."""
    if row.target == "direct":
        return "-"
    p50 = row.percentile(key, 0.5) - direct.percentile(key, 0.5)
    p99 = row.percentile(key, 0.99) - direct.percentile(key, 0.99)
    return f"{p50:.2f} / {p99:.2f}"


def report(latency: list[Result], throughput: list[WrkResult], args: argparse.Namespace) -> str:
    lines = [
        f"fake upstream: {args.tokens} tokens at {args.token_ms:g} ms each; "
        f"{args.rounds} rounds x {args.seconds:g} s per row; control plane workers: {args.workers}"
        f"; {'pinned: control plane on CPU 1, the rest on CPU 0' if args.pin else 'not pinned'}",
        "",
        "Streamed (added = through the control plane minus direct, per percentile):",
        "",
        "| concurrency | target | req/s | errors | TTFB p50 / p99 ms | added TTFB p50 / p99 ms "
        "| chunk gap p50 / p99 ms | added gap p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for concurrency in args.concurrency:
        direct = _pooled(latency, "direct", concurrency, True)
        for target in TARGETS:
            row = _pooled(latency, target, concurrency, True)
            added = _added(row, direct, "ttfb_ms")
            added_gap = _added(row, direct, "gap_ms")
            lines.append(
                f"| {concurrency} | {target} | {row.rate:.0f} | {row.samples['errors']} | "
                f"{row.percentile('ttfb_ms', 0.5):.2f} / {row.percentile('ttfb_ms', 0.99):.2f} | "
                f"{added} | {row.percentile('gap_ms', 0.5):.2f} / "
                f"{row.percentile('gap_ms', 0.99):.2f} | {added_gap} |"
            )
    lines += [
        "",
        "Not streamed (whole answer after all tokens):",
        "",
        "| concurrency | target | req/s | errors | latency p50 / p99 ms | added p50 / p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for concurrency in args.concurrency:
        direct = _pooled(latency, "direct", concurrency, False)
        for target in TARGETS:
            row = _pooled(latency, target, concurrency, False)
            added = _added(row, direct, "total_ms")
            lines.append(
                f"| {concurrency} | {target} | {row.rate:.0f} | {row.samples['errors']} | "
                f"{row.percentile('total_ms', 0.5):.2f} / {row.percentile('total_ms', 0.99):.2f}"
                f" | {added} |"
            )
    if throughput:
        lines += [
            "",
            f"Throughput (wrk, {args.wrk_connections} connections, {args.wrk_seconds} s per run, "
            "fake upstream answering at once; best round):",
            "",
            "| target | requests/s | p50 ms | p99 ms | errors (all rounds) |",
            "|---|---|---|---|---|",
        ]
        for target in TARGETS:
            rows = [r for r in throughput if r.target == target]
            best = max(rows, key=lambda r: r.requests_per_s)
            errors = sum(r.errors for r in rows)
            lines.append(
                f"| {target} | {best.requests_per_s:.0f} | {best.p50_ms:.2f} | "
                f"{best.p99_ms:.2f} | {errors} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--concurrency",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 64, 256],
        help="comma-separated (default 1,64,256)",
    )
    parser.add_argument("--seconds", type=float, default=6.0, help="per client run (default 6)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=16, help="tokens per request (default 16)")
    parser.add_argument(
        "--token-ms",
        type=float,
        default=20.0,
        help="the fake upstream's time per token (default 20 ms)",
    )
    parser.add_argument("--workers", type=int, default=1, help="control-plane worker processes")
    parser.add_argument(
        "--postgres",
        metavar="URL",
        default=None,
        help="run the registry on a fresh database on this PostgreSQL server "
        "(required for --workers > 1)",
    )
    parser.add_argument("--wrk-connections", type=int, default=64)
    parser.add_argument("--wrk-seconds", type=int, default=10)
    parser.add_argument("--no-throughput", dest="throughput", action="store_false")
    parser.add_argument(
        "--no-embeddings",
        dest="embeddings",
        action="store_false",
        help="dispatcher tiers 1-2 only (skips loading the embedding model)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="control plane on CPU 1, everything else on CPU 0 (taskset)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    args = parser.parse_args()
    if args.throughput and shutil.which("wrk") is None:
        parser.error("wrk is not installed (apt-get install wrk), or pass --no-throughput")
    with tempfile.TemporaryDirectory(prefix="hml-load-") as tmp, _database(args, Path(tmp)) as url:
        bench = Bench(args, Path(tmp), url)
        try:
            bench.start_upstream(args.token_ms)
            bench.start_control_plane()
            latency = latency_phase(bench, args)
            throughput = throughput_phase(bench, args) if args.throughput else []
        finally:
            bench.stop()
    print(report(latency, throughput, args))
    if args.json is not None:
        raw = {
            "latency": [r.__dict__ for r in latency],
            "throughput": [{k: v for k, v in r.__dict__.items()} for r in throughput],
        }
        args.json.write_text(json.dumps(raw))
    return 0


@contextmanager
def _database(args: argparse.Namespace, workdir: Path) -> Iterator[str]:
    if args.postgres:
        with _postgres_database(args.postgres) as url:
            yield url
    else:
        if args.workers > 1:
            raise SystemExit("--workers > 1 needs --postgres (workers share the registry)")
        yield f"sqlite:///{workdir / 'registry.db'}"


if __name__ == "__main__":
    sys.exit(main())
