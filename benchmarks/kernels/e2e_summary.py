"""The summary ``gpu_e2e.sh`` prints for one server's measured runs (GPU benchmark tooling).

Each measured run left ``<tag>-c<C>-<run>.json`` (``vllm bench serve``'s result, with
``server_phases_ms`` from :mod:`run_phases`). A run's name may end in ``.<round>`` (``many.2``):
another round of the same run in one server start. Every ratio is to the mean of the server's
base runs (``base``, ``base-again``, ``base.2``, ...), which are listed first with their drift
from the first to the last; then each run; then, for each run measured in more than one round,
the mean of its rounds' ratios and their range (the noise a single round's figure carries).
Where vLLM's phases were read, each adapter run also gets the time a request spent over the
base runs' mean, split by phase (:func:`phase_excess`: decode, prefill, the queue, and the time
before the queue), and runs of several rounds the mean of that split: which phase a ratio's gap
is in.

    python3 e2e_summary.py RESULTS_DIR TAG "base many one base.2 many.2 one.2" 64 [8 ...]

Standard library only: it runs on the GPU host beside vLLM in well under a second.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def run_of(name: str) -> str:
    """The run a measured run's name repeats: ``many.2`` -> ``many`` (a name without a round:
    itself)."""
    return name.split(".", 1)[0]


def is_base(name: str) -> bool:
    """Whether a run measured the base model (``base``, ``base-again``, ``base.3``, ...)."""
    return run_of(name).startswith("base")


@dataclass(frozen=True)
class Result:
    """One measured run's figures."""

    name: str
    throughput: float  # output tokens a second
    tpot_p50_ms: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    prompts: int
    phases: dict[str, Any] | None  # vLLM's own per-request means (run_phases.py)

    @classmethod
    def read(cls, name: str, path: Path) -> Result:
        data = json.loads(path.read_text())
        return cls(
            name=name,
            throughput=float(data["output_throughput"]),
            tpot_p50_ms=float(data["median_tpot_ms"]),
            ttft_p50_ms=float(data["median_ttft_ms"]),
            ttft_p99_ms=float(data.get("p99_ttft_ms", 0.0)),
            prompts=int(data["completed"]),
            phases=data.get("server_phases_ms"),
        )


#: The phases a request's server-side time is split into (:func:`phase_excess`), in print order.
PHASES = ("decode", "prefill", "queue", "before the queue")


def request_phases(phases: dict[str, Any]) -> dict[str, float]:
    """A run's per-request means (``server_phases_ms``) as the parts of a request's time: the
    decode, prefill and queue phases, and the time before the queue (vLLM's TTFT less its
    queue and prefill phases: the API server's work and the hand-over to the engine)."""
    queue, prefill = float(phases["queue"]), float(phases["prefill"])
    return {
        "decode": float(phases["decode"]),
        "prefill": prefill,
        "queue": queue,
        "before the queue": float(phases["ttft"]) - queue - prefill,
    }


def phase_excess(run: dict[str, Any], bases: list[dict[str, Any]]) -> dict[str, float]:
    """How much longer than the base runs' mean (ms) a request of ``run`` spent in each phase
    (:data:`PHASES`), and in all (``"request"``); each argument a ``server_phases_ms``."""
    mine = request_phases(run)
    base = [request_phases(b) for b in bases]
    excess = {k: mine[k] - sum(b[k] for b in base) / len(base) for k in PHASES}
    return {"request": sum(excess.values()), **excess}


def excess_text(excess: dict[str, float]) -> str:
    """:func:`phase_excess`'s split, as the summary prints it."""
    parts = ", ".join(f"{k} {excess[k]:+.1f}" for k in PHASES)
    return f"a request {excess['request']:+.1f} ms over base: {parts}"


def summary(results: Path, tag: str, runs: list[str], concurrency: int) -> list[str]:
    """The lines for one concurrency's runs of the server ``tag``, in the order run."""
    head = f"{tag} c{concurrency:>3}"
    found: dict[str, Result | None] = {}
    for name in runs:
        path = results / f"{tag}-c{concurrency}-{name}.json"
        found[name] = Result.read(name, path) if path.exists() else None
    bases = [r.throughput for r in found.values() if r is not None and is_base(r.name)]
    base = sum(bases) / len(bases) if bases else None
    lines = []
    if len(bases) >= 2:
        lines.append(
            f"{head} base runs {' then '.join(f'{b:.1f}' for b in bases)} out tok/s: "
            f"{100 * (bases[-1] / bases[0] - 1):+.1f} % from first to last"
        )
    base_phases = [
        r.phases for r in found.values() if r is not None and is_base(r.name) and r.phases
    ]
    rounds: dict[str, list[float]] = {}
    excesses: dict[str, list[dict[str, float]]] = {}
    for name, result in found.items():
        if result is None:
            lines.append(f"{head} {name:>7}: no result")
            continue
        ratio = "no base run"
        if base:
            ratio = f"{result.throughput / base:.3f}x base"
            rounds.setdefault(run_of(name), []).append(result.throughput / base)
        lines.append(
            f"{head} {name:>7}: {result.throughput:8.1f} out tok/s ({ratio})"
            f"  TPOT p50 {result.tpot_p50_ms:.2f} ms"
            f"  TTFT p50/p99 {result.ttft_p50_ms:.0f}/{result.ttft_p99_ms:.0f} ms"
            f"  prompts {result.prompts}"
        )
        if result.phases:
            p = result.phases
            lines.append(
                f"{'':>{len(tag) + 14}}server side: queue {p['queue']} ms, prefill "
                f"{p['prefill']} ms, TTFT {p['ttft']} ms, decode {p['decode']} ms"
            )
            if base_phases and not is_base(name):
                excess = phase_excess(p, base_phases)
                excesses.setdefault(run_of(name), []).append(excess)
                lines.append(f"{'':>{len(tag) + 14}}{excess_text(excess)}")
    for run, ratios in rounds.items():
        if len(ratios) > 1 and not is_base(run):
            lines.append(
                f"{head} {run:>7}: {sum(ratios) / len(ratios):.3f}x base over {len(ratios)} "
                f"rounds ({min(ratios):.3f}-{max(ratios):.3f})"
            )
    for run, split in excesses.items():
        if len(split) > 1:
            mean = {k: sum(e[k] for e in split) / len(split) for k in split[0]}
            lines.append(f"{head} {run:>7}: {excess_text(mean)} (mean of {len(split)} rounds)")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    results, tag, runs = Path(args[0]), args[1], args[2].split()
    for concurrency in args[3:]:
        for line in summary(results, tag, runs, int(concurrency)):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
