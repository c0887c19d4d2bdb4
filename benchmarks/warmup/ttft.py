"""Time to first token through the front door: a cold adapter, a warmed one, a warm one.

Starts the embedded stack (vLLM CPU + control plane, the tiny model) and, per round, registers
three fresh adapter names (copies of one demo adapter) and times one streamed 1-token request
through the control plane's front door with the stock ``openai`` client, to the first chunk:

- **cold**: the first request to a version nothing has loaded (vLLM's resolver plugin asks the
  control plane, loads the adapter from disk, then generates);
- **warmed**: the first user request to a version right after ``POST /admin/v1/warmup`` for it
  finished (the warm-up's own cold and warm requests went straight to vLLM);
- **warm**: a later request to a version already used once (an unmeasured first request).

The order of the three phases rotates from round to round, so that drift (other work on the
machine, caches) hits each phase alike; an unmeasured burn-in takes the one-time costs (vLLM's
first adapter load, the first warm-up). Before a measured request the benchmark checks with vLLM
(``GET /v1/models``) that a cold version is not loaded and a warmed one is.

Background warm-up (on every change of what is served) would load the cold versions before they
are asked for, so the control plane runs with ``HI_MOE_LORA_WARMUP=false`` (set here before the
stack starts: the stack's settings and its environment both start from this process's
environment); on-demand warm-up is unaffected. Health probes (which also send requests through
every served version) run once, when vLLM comes up, and then only every hour; the dispatcher's
embeddings are off (``model="auto"`` is not used). Also recorded: the warm-up reports' ``load_ms``
(cold minus warm, measured by the control plane), the control plane's ``/metrics`` histogram
``hi_moe_lora_adapter_load_seconds`` by source, and per request the front door's own TTFT and its
adapter cache verdict (``hi_moe_lora_time_to_first_token_seconds``,
``hi_moe_lora_adapter_cache_requests_total``).

Run: ``.venv/bin/python -m benchmarks.warmup.ttft [--rounds 9] [--out results.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.control_api import ControlPlaneClient
from hi_moe_lora.tinymodel import build_fleet

REPO_ROOT = Path(__file__).resolve().parents[2]
PHASES = ("cold", "warmed", "warm")
VERSION = "1.0.0"
PROMPT = "def fibonacci(n):"
#: the control plane's settings for this run (see the module docstring)
ENVIRONMENT = {
    "HI_MOE_LORA_WARMUP": "false",
    "HI_MOE_LORA_DISPATCH_EMBEDDINGS": "false",
}
HEALTH_INTERVAL_S = 3600.0
LOAD_FAMILY = "hi_moe_lora_adapter_load_seconds"
TTFT_FAMILY = "hi_moe_lora_time_to_first_token_seconds"
CACHE_FAMILY = "hi_moe_lora_adapter_cache_requests"
REQUESTS_FAMILY = "hi_moe_lora_requests"


@dataclass
class Sample:
    phase: str
    round: int
    name: str
    source: str
    #: client-side: from sending the request to the first streamed chunk
    ttft_ms: float
    #: the front door's own TTFT for this request (its /metrics histogram)
    server_ttft_ms: float | None
    #: the front door's verdict: "hit" (vLLM had the version loaded, as far as it knew) or "miss"
    cache: str | None
    served_model: str


@dataclass
class WarmUpRecord:
    name: str
    round: int
    #: the warm-up's cold one-token request, straight to vLLM (not streamed)
    time_ms: float
    load_ms: float | None
    outcome: str
    #: the whole POST /admin/v1/warmup, seen by the client
    call_ms: float


class Scraper:
    """The control plane's ``/metrics``, parsed."""

    def __init__(self, url: str) -> None:
        self._client = httpx.Client(base_url=url, timeout=30)

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        text = self._client.get("/metrics").raise_for_status().text
        return [
            (s.name, dict(s.labels), s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]

    def per_request(self, specialist: str) -> dict[str, float]:
        """The counters one request of ``specialist`` moves (read before and after it)."""
        samples = self.samples()

        def pick(sample: str, **labels: str) -> float:
            return sum(
                value
                for name, have, value in samples
                if name == sample and all(have.get(k) == v for k, v in labels.items())
            )

        return {
            "ttft_sum": pick(TTFT_FAMILY + "_sum", specialist=specialist),
            "ttft_count": pick(TTFT_FAMILY + "_count", specialist=specialist),
            "hit": pick(CACHE_FAMILY + "_total", specialist=specialist, result="hit"),
            "miss": pick(CACHE_FAMILY + "_total", specialist=specialist, result="miss"),
        }

    def load_histogram(self) -> dict[str, dict[str, Any]]:
        """``hi_moe_lora_adapter_load_seconds`` by source: count, sum, mean, buckets."""
        out: dict[str, dict[str, Any]] = {}
        for name, labels, value in self.samples():
            if not name.startswith(LOAD_FAMILY):
                continue
            entry = out.setdefault(labels.get("source", "?"), {"buckets": {}})
            if name == LOAD_FAMILY + "_count":
                entry["count"] = value
            elif name == LOAD_FAMILY + "_sum":
                entry["sum_s"] = value
            elif name == LOAD_FAMILY + "_bucket":
                entry["buckets"][labels["le"]] = value
        for entry in out.values():
            count = entry.get("count", 0.0)
            entry["mean_ms"] = entry.get("sum_s", 0.0) / count * 1000.0 if count else None
        return out

    def outcomes(self, prefix: str) -> dict[str, dict[str, int]]:
        """Front-door requests of the specialists named ``prefix…``, by name and outcome."""
        out: dict[str, dict[str, int]] = {}
        for name, labels, value in self.samples():
            specialist = labels.get("specialist", "")
            if name == REQUESTS_FAMILY + "_total" and specialist.startswith(prefix):
                counts = out.setdefault(specialist, {})
                counts[labels["outcome"]] = counts.get(labels["outcome"], 0) + int(value)
        return out

    def close(self) -> None:
        self._client.close()


class Bench:
    def __init__(self, stack: EmbeddedStack, settle_s: float) -> None:
        self.stack = stack
        self.settle_s = settle_s
        self.admin = ControlPlaneClient(stack.control_plane_url, timeout_s=300)
        self.openai = openai.OpenAI(
            base_url=f"{stack.control_plane_url}/v1",
            api_key="unused",
            max_retries=0,
            timeout=300,
        )
        self.vllm = httpx.Client(base_url=stack.vllm_url, timeout=30)
        self.metrics = Scraper(stack.control_plane_url)
        self.samples: list[Sample] = []
        self.warmups: list[WarmUpRecord] = []
        self.primes: list[Sample] = []
        self.burn_in: list[Sample] = []
        self._nonce = itertools.count()

    def close(self) -> None:
        self.openai.close()
        self.vllm.close()
        self.metrics.close()

    def loaded_on_vllm(self) -> set[str]:
        models = self.vllm.get("/v1/models").raise_for_status().json()
        return {m["id"] for m in models["data"]}

    def first_token(self, phase: str, round_: int, name: str, source: str) -> Sample:
        """One streamed 1-token request for ``name``; TTFT to the first chunk."""
        time.sleep(self.settle_s)
        before = self.metrics.per_request(name)
        # a fresh prefix every time: no request finds another's prompt in vLLM's prefix cache
        prompt = f"{next(self._nonce)} {PROMPT}"
        started = time.perf_counter()
        stream = self.openai.completions.create(
            model=name, prompt=prompt, max_tokens=1, temperature=0.0, stream=True
        )
        first: float | None = None
        served = ""
        for chunk in stream:  # drain: the request is finished (and counted) at the end
            if first is None:
                first = time.perf_counter()
                served = chunk.model
        if first is None:
            raise RuntimeError(f"{name}: the stream had no chunk")
        after = self.metrics.per_request(name)
        server_ttft = None
        if after["ttft_count"] - before["ttft_count"] == 1:
            server_ttft = round((after["ttft_sum"] - before["ttft_sum"]) * 1000.0, 2)
        cache = None
        if after["hit"] - before["hit"] == 1:
            cache = "hit"
        elif after["miss"] - before["miss"] == 1:
            cache = "miss"
        if not served.startswith(name):
            raise RuntimeError(f"{name}: answered by {served!r}, not the adapter")
        return Sample(
            phase,
            round_,
            name,
            source,
            round((first - started) * 1000.0, 2),
            server_ttft,
            cache,
            served,
        )

    def register(self, name: str, source: Path) -> str:
        self.admin.register(name, VERSION, str(source))
        return f"{name}@{VERSION}"

    def cold(self, round_: int, source: Path) -> Sample:
        name = f"ttft-cold-{round_}"
        served = self.register(name, source)
        time.sleep(self.settle_s)
        if served in self.loaded_on_vllm():
            raise RuntimeError(f"{served} is loaded before its first request: not cold")
        return self.first_token("cold", round_, name, source.name)

    def warmed(self, round_: int, source: Path) -> Sample:
        name = f"ttft-warmed-{round_}"
        served = self.register(name, source)
        started = time.perf_counter()
        report = self.admin.warmup([name])
        call_ms = round((time.perf_counter() - started) * 1000.0, 2)
        (result,) = report["results"]
        self.warmups.append(
            WarmUpRecord(
                name, round_, result["time_ms"], result["load_ms"], result["outcome"], call_ms
            )
        )
        if result["outcome"] != "loaded" or served not in self.loaded_on_vllm():
            raise RuntimeError(f"warm-up of {served} did not load it: {result}")
        return self.first_token("warmed", round_, name, source.name)

    def warm(self, round_: int, source: Path) -> Sample:
        name = f"ttft-warm-{round_}"
        self.register(name, source)
        self.primes.append(self.first_token("prime", round_, name, source.name))
        return self.first_token("warm", round_, name, source.name)

    def burn(self, source: Path) -> None:
        """Unmeasured: vLLM's first adapter load, the first resolve and the first warm-up pay
        one-time costs that would otherwise land on whichever phase comes first."""
        name = "ttft-burn-in-0"
        self.register(name, source)
        self.burn_in += [self.first_token("burn-in", -1, name, source.name) for _ in range(2)]
        name = "ttft-burn-in-1"
        self.register(name, source)
        self.admin.warmup([name])
        self.burn_in.append(self.first_token("burn-in", -1, name, source.name))

    def run(self, rounds: int, sources: list[Path]) -> None:
        steps = {"cold": self.cold, "warmed": self.warmed, "warm": self.warm}
        self.burn(sources[0])
        for round_ in range(rounds):
            source = sources[round_ % len(sources)]
            shift = round_ % len(PHASES)
            order = PHASES[shift:] + PHASES[:shift]
            for phase in order:
                sample = steps[phase](round_, source)
                self.samples.append(sample)
                print(
                    f"round {round_} {phase:<6} {sample.name:<16} {sample.ttft_ms:9.1f} ms "
                    f"(front door {sample.server_ttft_ms} ms, {sample.cache})",
                    flush=True,
                )


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "median_ms": round(statistics.median(values), 2),
        "min_ms": round(min(values), 2),
        "max_ms": round(max(values), 2),
    }


def summarize(bench: Bench, load_histogram: dict[str, Any]) -> dict[str, Any]:
    phases: dict[str, Any] = {}
    for phase in PHASES:
        mine = [s for s in bench.samples if s.phase == phase]
        phases[phase] = {
            "client": _stats([s.ttft_ms for s in mine]),
            "front_door": _stats([s.server_ttft_ms for s in mine if s.server_ttft_ms is not None]),
            "cache": {
                verdict: sum(1 for s in mine if s.cache == verdict) for verdict in ("hit", "miss")
            },
        }
    warm = phases["warm"]["client"]["median_ms"]
    loads = [w.load_ms for w in bench.warmups if w.load_ms is not None]
    by_round: dict[int, dict[str, float]] = {}
    for s in bench.samples:
        by_round.setdefault(s.round, {})[s.phase] = s.ttft_ms
    return {
        "phases": phases,
        "ratio_cold_to_warm": round(phases["cold"]["client"]["median_ms"] / warm, 2),
        "ratio_warmed_to_warm": round(phases["warmed"]["client"]["median_ms"] / warm, 2),
        # the same ratios within each round (three requests seconds apart), then the median
        "paired_ratio_cold_to_warm": round(
            statistics.median(r["cold"] / r["warm"] for r in by_round.values()), 2
        ),
        "paired_ratio_warmed_to_warm": round(
            statistics.median(r["warmed"] / r["warm"] for r in by_round.values()), 2
        ),
        "prime": _stats([s.ttft_ms for s in bench.primes]),
        "warmup_load_ms": _stats(loads) if loads else None,
        "warmup_cold_request_ms": _stats([w.time_ms for w in bench.warmups]),
        "warmup_call_ms": _stats([w.call_ms for w in bench.warmups]),
        "adapter_load_seconds": load_histogram,
    }


def markdown(summary: dict[str, Any]) -> str:
    phases = summary["phases"]
    warm = phases["warm"]["client"]["median_ms"]
    lines = [
        "| phase | n | TTFT median ms | min, max ms | / warm | front door median ms | cache |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for phase in PHASES:
        client, door, cache = phases[phase]["client"], phases[phase]["front_door"], phases[phase]
        lines.append(
            f"| {phase} | {client['n']} | {client['median_ms']:.1f} | "
            f"{client['min_ms']:.1f}, {client['max_ms']:.1f} | "
            f"{client['median_ms'] / warm:.2f} | {door['median_ms']:.1f} | "
            f"{cache['cache']['hit']} hit, {cache['cache']['miss']} miss |"
        )
    lines.append("")
    lines.append(
        "Ratios within each round, median over rounds: cold / warm "
        f"{summary['paired_ratio_cold_to_warm']:.2f}, warmed / warm "
        f"{summary['paired_ratio_warmed_to_warm']:.2f}."
    )
    loads = summary["warmup_load_ms"]
    cold_req = summary["warmup_cold_request_ms"]
    lines.append(
        f"Warm-up reports: load_ms median {loads['median_ms']:.1f} "
        f"({loads['min_ms']:.1f} to {loads['max_ms']:.1f}); its cold request median "
        f"{cold_req['median_ms']:.1f} ms; the whole POST median "
        f"{summary['warmup_call_ms']['median_ms']:.1f} ms."
        if loads
        else "Warm-up reports: no load_ms"
    )
    outcomes = summary.get("request_outcomes")
    if outcomes:
        lines.append(
            "Front-door requests by outcome: "
            + "; ".join(
                f"{phase} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v)
                for phase, counts in sorted(outcomes.items())
            )
        )
    for source, entry in sorted(summary["adapter_load_seconds"].items()):
        mean = entry["mean_ms"]
        lines.append(
            f'/metrics {LOAD_FAMILY}{{source="{source}"}}: count {entry.get("count", 0):.0f}, '
            f"mean {'-' if mean is None else f'{mean:.1f} ms'}"
        )
    return "\n".join(lines)


def _commit() -> str:
    def git(*argv: str) -> str:
        return subprocess.run(
            ["git", *argv], cwd=REPO_ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    dirty = " (with uncommitted changes)" if git("status", "--porcelain") else ""
    return git("rev-parse", "--short", "HEAD") + dirty


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment (which the stack's settings start from)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    fleet = build_fleet(REPO_ROOT / ".cache" / "tiny-fleet")
    sources = [fleet.adapters[key] for key in sorted(fleet.adapters)]
    with environment(ENVIRONMENT):
        stack = EmbeddedStack(
            workdir=workdir / "stack",
            model_dir=fleet.model_dir,
            max_loras=args.max_loras,
            health_interval_s=HEALTH_INTERVAL_S,
        )
        settings = stack.control_plane_settings()
        if settings.warmup or settings.dispatch_embeddings:
            raise RuntimeError("the environment did not reach the control plane's settings")
        print("starting vLLM (CPU) and the control plane; vLLM takes about a minute...", flush=True)
        started = time.perf_counter()
        stack.start()
    print(f"stack up in {time.perf_counter() - started:.0f} s; logs: {stack.log_dir}", flush=True)
    bench = Bench(stack, args.settle)
    try:
        bench.run(args.rounds, sources)
        load_histogram = bench.metrics.load_histogram()
        time.sleep(args.settle)  # the last stream's bookkeeping
        outcomes = bench.metrics.outcomes("ttft-")
        last_reason = bench.admin.last_warmup()["reason"]
    finally:
        bench.close()
        stack.stop()
    summary = summarize(bench, load_histogram)
    summary["last_warmup_reason"] = last_reason  # "on demand": no background run happened
    summary["request_outcomes"] = _by_phase(outcomes)
    return {
        "benchmark": "warm-up: time to first token",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "commit": _commit(),
        "command": " ".join([".venv/bin/python -m benchmarks.warmup.ttft", *sys.argv[1:]]),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_after": os.getloadavg(),
        },
        "settings": {
            "rounds": args.rounds,
            "max_loras": args.max_loras,
            "settle_s": args.settle,
            "health_interval_s": HEALTH_INTERVAL_S,
            "environment": ENVIRONMENT,
            "model": str(fleet.model_dir),
            "prompt": PROMPT,
        },
        "summary": summary,
        "samples": [asdict(s) for s in bench.samples],
        "primes": [asdict(s) for s in bench.primes],
        "burn_in": [asdict(s) for s in bench.burn_in],
        "warmups": [asdict(w) for w in bench.warmups],
        "request_outcomes": outcomes,
    }


def _by_phase(outcomes: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Outcome counts per phase (``ttft-warm-*`` holds the primes too)."""
    phases: dict[str, dict[str, int]] = {}
    for specialist, counts in outcomes.items():
        phase = specialist.removeprefix("ttft-").rsplit("-", 1)[0]
        total = phases.setdefault(phase, {})
        for outcome, count in counts.items():
            total[outcome] = total.get(outcome, 0) + count
    return phases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=9, help="fresh names per phase (a multiple of 3)"
    )
    parser.add_argument("--max-loras", type=int, default=4, help="vLLM's --max-loras")
    parser.add_argument(
        "--settle", type=float, default=1.0, help="seconds of quiet before each measured request"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the results here (JSON)")
    parser.add_argument(
        "--workdir", type=Path, default=None, help="keep the stack's files (logs) here"
    )
    args = parser.parse_args(argv)
    if args.workdir is not None:
        results = measure(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="hml-warmup-ttft-") as tmp:
            results = measure(args, Path(tmp))
    print(f"\n{args.rounds} fresh names per phase, phases rotated each round\n")
    print(markdown(results["summary"]))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nresults: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
