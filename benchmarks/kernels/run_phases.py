"""Where a run's requests spent their time, from vLLM's own histograms (GPU benchmark tooling).

vLLM's ``/metrics`` keeps, per finished request, the time it queued before its first scheduling,
its prefill (first scheduling to first token), its decode and the server-side time to first
token. Two snapshots around one measured run give that run's means, which split a TTFT that
``vllm bench serve`` reports whole into queueing and prefill: the question the 8-concurrent rows
of 2026-11-27 left open (adapter runs paid 50-130 ms of TTFT over the base model).

    python3 run_phases.py snapshot URL BEFORE.json          # before the run
    python3 run_phases.py diff BEFORE.json URL [--into RESULT.json]

``diff`` prints the means in ms and, with ``--into``, adds them to the run's result file as
``server_phases_ms`` (``gpu_e2e.sh`` does both around every measured run). It imports only the
standard library and ``prometheus_client`` (not vLLM), so it starts in well under a second.
:func:`metric_sums` also serves ``gpu_churn.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

#: vLLM's per-request histograms (vLLM 0.26 and 0.32), by the name the means take
PHASES = {
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
    "ttft": "vllm:time_to_first_token_seconds",
}


def metric_sums(url: str) -> dict[str, float]:
    """vLLM's ``/metrics``, parsed: each sample name's values summed over their label sets
    (vLLM labels them by model and engine)."""
    with urllib.request.urlopen(f"{url.rstrip('/')}/metrics", timeout=30) as response:
        text = response.read().decode()
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


def snapshot(url: str) -> dict[str, float]:
    """``<histogram>_sum`` and ``<histogram>_count`` of :data:`PHASES` now (0 before any)."""
    sums = metric_sums(url)
    return {
        f"{name}_{part}": sums.get(f"{name}_{part}", 0.0)
        for name in PHASES.values()
        for part in ("sum", "count")
    }


def phase_means(before: dict[str, float], after: dict[str, float]) -> dict[str, float | int | None]:
    """Per-request means in ms of the requests that finished between the two snapshots (None
    for a phase no request finished)."""
    out: dict[str, float | int | None] = {}
    for phase, name in PHASES.items():
        count = after[f"{name}_count"] - before[f"{name}_count"]
        total = after[f"{name}_sum"] - before[f"{name}_sum"]
        out[phase] = round(1e3 * total / count, 2) if count > 0 else None
    out["requests"] = int(after[f"{PHASES['ttft']}_count"] - before[f"{PHASES['ttft']}_count"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    take = sub.add_parser("snapshot", help="save the histograms' sums and counts now")
    take.add_argument("url")
    take.add_argument("out", type=Path)
    diff = sub.add_parser("diff", help="the means of the requests finished since a snapshot")
    diff.add_argument("before", type=Path)
    diff.add_argument("url")
    diff.add_argument("--into", type=Path, help="add them to this result JSON")
    args = parser.parse_args()
    if args.command == "snapshot":
        args.out.write_text(json.dumps(snapshot(args.url)))
        return 0
    means = phase_means(json.loads(args.before.read_text()), snapshot(args.url))
    print(json.dumps(means))
    if args.into is not None:
        result = json.loads(args.into.read_text())
        result["server_phases_ms"] = means
        args.into.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
