"""Slot churn and the cold-load tail (issue 20): many adapters over few slots, through our resolver.

Starts the embedded stack (control plane on SQLite + vLLM with our plugins) on ``--model`` with
``--max-loras SLOTS`` (16), registers ``ADAPTERS`` (64) random adapters through the REST API, and
lets vLLM load each one at run time, on first use, through our resolver. Requests name
``churn-<i>@1.0.0``, as the front door forwards them and as warm-up loads them (runs before
2026-11-27's eighth window named the bare ``churn-<i>``, which the resolver serves alike, but
which vLLM holds apart from the ``@version`` name). The kernels are the environment's
(``HI_MOE_LORA_KERNELS=vllm`` for vLLM's own). Then, with ``vllm bench serve``
(uniform traffic, 64 concurrent, 256 tokens in, 128 out, the prefix cache off):

1. ``cold16``: the first 16 adapters, each resolved and read from disk on first use;
2. ``warm16``: the same 16 again, all in slots: the warm case;
3. ``cold64``: all adapters, the other 48 resolved and read on first use;
4. ``churn64``: all adapters again, all in host memory (``--max-cpu-loras``), 16 slots: each step
   may move adapters between host and device;
5. ``warmed64`` (not in the default order; first on a fresh server): all adapters after the
   control plane's on-demand warm-up (``POST /admin/v1/warmup``, its default plan: as many versions
   as ``--max-cpu-loras``, here all of them), so none is read from disk during the run. Against
   ``cold64`` it tells what warming host memory takes off the cold-load tail.

TTFT median and p99 of each run against ``warm16`` is the cliff. vLLM's scheduler admits a request
only while its batch holds at most SLOTS distinct adapters, so much of the cliff is queueing; the
resolve, read and load times our plugin recorded (``hi_moe_lora_resolver_duration_seconds``,
``hi_moe_lora_vllm_adapter_*_seconds`` on vLLM's ``/metrics``) tell the cold loads' part. Slot
activations of adapters already in host memory are not timed.

**Isolation** (vLLM issue #47724: a slot reassigned without refreshing the kernel's metadata served
another adapter): ``greedy_probe`` scores fixed tokens teacher-forced for the base model and four
adapters alone, then again while ``warm16`` runs (batch-composition noise: two probed adapters are
in its set, two force a slot swap) and while ``churn64`` runs. A request served with another
adapter's weights would move by about the distance between two adapters, which the summary
prints beside the moves under load. A probe waits until vLLM runs the load's requests, and the
counts before and after it are kept (``load_running``). Exits 1 when a move under churn exceeds
a quarter of the distance.

Usage (GPU kit, after make-random-llama.py; writes the missing adapters itself)::

    HI_MOE_LORA_KERNELS=ours python3 benchmarks/kernels/gpu_churn.py --out $OUT/churn-ours.json

Run one such server per host, with nothing beside it that loads adapters or compiles kernels:
vLLM reads and loads adapters on the host's CPUs, and two servers on one host read each adapter
in 3.3-4.0 s instead of about 0.1 s (2026-11-27), a compiling test suite beside stretched a
64-adapter warm-up from 14-20 to 127 s (2026-11-28).

``--runs none`` skips the timed runs and probes only (about 350 s of a device call instead of
500 s: the vLLM start alone is 165-236 s); ``--no-isolation`` skips the probes (about 150 s).
The timed runs call vLLM's benchmark in this process (``bench_resident``); only the loads beside
the probes run in processes of their own.

On the CPU build (a check of the script, not a benchmark): ``--model`` a tiny model with 64
adapters ``a<i>`` beside it in ``--adapters``, ``--dtype float32 --max-model-len 1024``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_resident
import greedy_probe
from run_phases import metric_sums

from hi_moe_lora.app.embedded import EmbeddedStack
from hi_moe_lora.control_api import ControlPlaneClient
from plugins.metrics import ADAPTER_LOAD, ADAPTER_READ, RESOLVER_DURATION

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
CONCURRENCY, PROMPTS, INPUT_LEN, OUTPUT_LEN = 64, 256, 256, 128
#: the one version registered of every adapter
VERSION = "1.0.0"
#: the timed runs, in their default order, and how many of the adapters each spreads over
RUNS = {"cold16": 16, "warm16": 16, "cold64": 64, "churn64": 64, "warmed64": 64}
DEFAULT_RUNS = ("cold16", "warm16", "cold64", "churn64")
#: probed adapters: two inside the warm set of 16, two outside it
PROBED = (3, 9, 40, 63)
#: our plugin's timings on vLLM's /metrics (resolves in the API server, disk reads and cold loads
#: in the worker), by the key they take in the summary
TIMED = {
    "resolver_duration": RESOLVER_DURATION,
    "vllm_adapter_read": ADAPTER_READ,
    "vllm_adapter_load": ADAPTER_LOAD,
}
#: a probe counts as "beside a load" once vLLM runs this many requests (of 64 sent at once; under
#: churn only the requests of the adapters in slots run)
LOAD_RUNNING = 8


#: a run in its own process (the load beside a probe, stopped when the probe is done)
BENCH_SERVE = [sys.executable, str(HERE / "bench_resident.py")]


def bench_args(url: str, model: str, names: list[str], result: Path, prompts: int) -> list[str]:
    """``vllm bench serve``'s arguments for a run uniform over ``names``, its JSON to ``result``."""
    seed = sum(result.name.encode())
    return [
        "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", model, "--dataset-name", "random",
        "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
        "--num-prompts", str(prompts), "--max-concurrency", str(CONCURRENCY), "--ignore-eos",
        "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,90,99",
        "--seed", str(seed), "--save-result", "--result-dir", str(result.parent),
        "--result-filename", result.name, "--lora-modules", *names,
    ]  # fmt: skip


def bench(url: str, model: str, names: list[str], result: Path) -> dict[str, Any]:
    """One measured run (:data:`PROMPTS` prompts) in this process (vLLM's benchmark imported once,
    not once per run: ``bench_resident``); its JSON result."""
    log = result.with_suffix(".log")
    if bench_resident.run(bench_args(url, model, names, result, PROMPTS), log=log):
        raise RuntimeError(f"vllm bench serve failed: {log}")
    data: dict[str, Any] = json.loads(result.read_text())
    return data


def load_times(url: str) -> dict[str, float]:
    """The sums and counts of our plugin's timings (:data:`TIMED`) so far."""
    sums = metric_sums(url)
    return {
        f"{key}_{part}": sums.get(f"{metric}_{part}", 0.0)
        for key, metric in TIMED.items()
        for part in ("sum", "count")
    }


def forced_moves(solo: dict[str, Any], other: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per probed model, how far ``other``'s teacher-forced log-probabilities are from solo."""
    return {
        model: greedy_probe.forced_difference(values, other["forced"][model])
        for model, values in solo["forced"].items()
    }


def running(url: str) -> int:
    """Requests vLLM runs now (``vllm:num_requests_running``, summed over its engines)."""
    return int(metric_sums(url).get("vllm:num_requests_running", 0.0))


def probe_beside(
    port: int, models: list[str], url: str, model: str, names: list[str], work: Path
) -> dict[str, Any]:
    """The probe while a uniform load over ``names`` runs: the load is started first, the probe
    waits until vLLM runs at least :data:`LOAD_RUNNING` requests, and the requests running before
    and after the probe are recorded with it (``load_running``); a load that never reaches that
    count raises instead of letting the probe pass as "beside a load"."""
    name = f"load-{len(names)}"
    log = (work / f"{name}.log").open("w")
    argv = [*BENCH_SERVE, *bench_args(url, model, names, work / f"{name}.json", prompts=4096)]
    load = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while running(url) < LOAD_RUNNING:
            if load.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {name} load never ran {LOAD_RUNNING} requests: {log.name}")
            time.sleep(0.5)
        before = running(url)
        result = greedy_probe.probe(port, models)
        result["load_running"] = [before, running(url)]
        if load.poll() is not None:
            raise RuntimeError(f"the {name} load ended during the probe: {log.name}")
        return result
    finally:
        load.terminate()
        load.wait(timeout=60)
        log.close()


def runs_or_probes(runs: str, isolation: bool) -> bool:
    """Whether the arguments ask for anything."""
    return isolation or runs != "none"


def warm_up(control: ControlPlaneClient) -> dict[str, Any]:
    """The control plane's on-demand warm-up of its default plan; what it loaded, and its time."""
    began = time.perf_counter()
    report = control.warmup()
    summary = {
        "s": round(time.perf_counter() - began, 1),
        "loaded": report["loaded"],
        "failed": report["failed"],
        "targets": len(report["targets"]),
    }
    logger.info("warm-up: %s", summary)
    if report["failed"]:
        raise RuntimeError(f"the warm-up failed for {report['failed']} versions: {report}")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("/tmp/m8b"))
    parser.add_argument("--adapters", type=Path, default=Path("/tmp/m8b-adapters"))
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument(
        "--runs",
        default=",".join(DEFAULT_RUNS),
        help="the timed runs, in order (comma-separated, from the default; 'none': only the "
        "isolation probes, whose loads then meet adapters that were never loaded)",
    )
    parser.add_argument(
        "--no-isolation",
        dest="isolation",
        action="store_false",
        help="skip the isolation probes (timed runs only)",
    )
    args = parser.parse_args()
    if not runs_or_probes(args.runs, args.isolation):
        parser.error("--runs none with --no-isolation leaves nothing to do")
    runs_chosen = [] if args.runs == "none" else args.runs.split(",")
    if unknown := [run for run in runs_chosen if run not in RUNS]:
        parser.error(f"unknown runs {unknown}: choose from {', '.join(RUNS)} or 'none'")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    kernels = os.environ.get("HI_MOE_LORA_KERNELS", "ours")
    subprocess.run(
        [
            sys.executable,
            str(HERE / "make_lora_adapters.py"),
            str(args.model),
            str(args.adapters),
            str(args.count),
        ],
        check=True,
    )
    work = Path(tempfile.mkdtemp(prefix="churn-"))
    gpu_args = ("--gpu-memory-utilization", "0.85") if shutil.which("nvidia-smi") else ()
    model = str(args.model.resolve())
    stack = EmbeddedStack(
        workdir=work / "stack",
        model_dir=args.model.resolve(),
        dtype=args.dtype,
        max_lora_rank=16,
        max_loras=args.slots,
        max_cpu_loras=args.count,
        max_model_len=args.max_model_len,
        source_roots=[args.adapters.resolve()],
        health_checks=False,
        warmup=False,
        vllm_api_key=None,
        vllm_extra_args=("--no-enable-prefix-caching", *gpu_args),
    )
    summary: dict[str, Any] = {"kernels": kernels, "adapters": args.count, "slots": args.slots}
    began = time.perf_counter()
    stack.start()
    summary["start_s"] = round(time.perf_counter() - began, 1)
    url, port = stack.vllm_url, stack.vllm_port
    adapters = [f"churn-{i}" for i in range(args.count)]
    # requests name each version as the control plane's front door forwards it (and warm-up
    # loads it): ``name@version``, so a version warm-up loaded is the one the runs ask for
    names = [f"{adapter}@{VERSION}" for adapter in adapters]
    try:
        control = ControlPlaneClient(stack.control_plane_url, timeout_s=600)
        began = time.perf_counter()
        for index, adapter in enumerate(adapters):
            control.register(adapter, VERSION, str(args.adapters.resolve() / f"a{index}"))
        summary["register_s"] = round(time.perf_counter() - began, 1)
        probed = [model, *(names[i] for i in PROBED if i < args.count)]
        runs: dict[str, Any] = {}
        for run in runs_chosen:
            chosen = names[: RUNS[run]]
            if run == "warmed64":
                summary["warmup"] = warm_up(control)
            before = load_times(url)
            result = bench(url, model, chosen, work / f"{run}.json")
            after = load_times(url)
            loads = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            runs[run] = {
                "ttft_ms_p50": result["median_ttft_ms"],
                "ttft_ms_p99": result["p99_ttft_ms"],
                "tpot_ms_p50": result["median_tpot_ms"],
                "output_tok_s": result["output_throughput"],
                "completed": result["completed"],
            }
            for timed in TIMED:  # how many, and their mean, in ms
                count = loads.get(f"{timed}_count", 0.0)
                runs[run][f"{timed}_n"] = count
                runs[run][f"{timed}_ms"] = 1e3 * loads.get(f"{timed}_sum", 0.0) / max(count, 1)
            logger.info("%s: %s", run, runs[run])
            summary["runs"] = runs
            args.out.write_text(json.dumps(summary, indent=1))  # kept if a later step fails
        if not args.isolation:
            print(json.dumps(summary, indent=1))
            return 0
        solo = greedy_probe.probe(port, probed)
        again = greedy_probe.probe(port, probed)
        warm_load = probe_beside(port, probed, url, model, names[:16], work)
        churn_load = probe_beside(port, probed, url, model, names, work)
        distance = statistics.median(
            greedy_probe.forced_difference(solo["forced"][a], solo["forced"][b])["median"]
            for a, b in itertools.pairwise(probed[1:])
        )
        summary["isolation"] = {
            "solo_again": forced_moves(solo, again),
            "beside_warm16": forced_moves(solo, warm_load),
            "beside_churn64": forced_moves(solo, churn_load),
            "load_running": {
                "warm16": warm_load["load_running"],
                "churn64": churn_load["load_running"],
            },
            "adapter_to_adapter_median": distance,
        }
    finally:
        stack.stop()
    worst = max(m["median"] for m in summary["isolation"]["beside_churn64"].values())
    summary["isolated"] = worst < distance / 4
    args.out.write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0 if summary["isolated"] else 1


if __name__ == "__main__":
    sys.exit(main())
