"""Where a served step's GPU time goes: a summary of a vLLM worker's torch-profiler trace.

vLLM (``--profiler-config '{"profiler": "torch", ...}'``, then ``POST /start_profile`` and
``/stop_profile``) annotates every engine step on the worker's CPU thread as
``execute_context_C(c)_generation_G(g)``. Each GPU activity (kernel, memcpy, memset) is tied
by its correlation id to the CUDA runtime call that launched it (a whole CUDA graph replay shares
the id of its ``cudaGraphLaunch``), and that call to the last step annotation that began before
it. So every kernel is charged to the step that launched it, the sampler's (launched after the
forward, outside the annotation) included.

Per step: GPU busy time by category (our fused LoRA kernel, our base GEMM with LoRA inside,
vLLM's LoRA kernels, GEMMs, attention, copies, the rest), the span from its first kernel's start
to its last one's end, the idle time inside that span (no activity of the step running) with the
pairs of kernels around its largest gaps, and the period to the next step's first kernel (the
served step time, TPOT's unit). On the host side: how long the step's annotation lasted on the
CPU, and how much of it the LoRA ops took (our ``hi_moe_lora::lora_linear`` and
``hi_moe_lora::gemm_lora_linear``, the base GEMM with its LoRA; vLLM's
``lora_shrink``/``lora_expand``), with their calls, and where the rest of it went: the host time
of the step's outermost CPU events (ops, annotations, CUDA runtime calls) by name, and the time
between them (Python outside any op). A step that vLLM runs without a CUDA graph
(more tokens than its largest capture size) launches every op from Python, and a host time above
the GPU span marks a step the CPU holds up. vLLM also copies each step annotation onto the GPU
timeline (``gpu_user_annotation``); only the CPU one marks a step (the copy once split every
step in two, with the later kernels charged to it).

Steps are grouped as decode-only (no context tokens), mixed (a prefill chunk inside) and
mixed-large (mixed, with more tokens than ``--graph-max-tokens``, vLLM's largest CUDA graph: 512
unless ``--cudagraph-capture-sizes`` says otherwise); the table gives medians per group;
``--json`` adds them, with the heaviest "other" kernels, to a file keyed by label (several
traces, one file).
Usage: python step_profile.py TRACE.pt.trace.json.gz [--label L] [--json SUMMARY.json]
       [--graph-max-tokens 512]
       python step_profile.py --ratios SUMMARY.json --base LABEL  (each other label's decode
       step against the base label's: the period's ratio, the served one, and the GPU busy
       time's, which the host's idle gaps do not move)
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import itertools
import json
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STEP_PATTERN = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")

#: (category, substrings of the kernel name), first match wins; copies go by trace category.
KERNEL_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # (vLLM's MoE one is fused_moe_lora_kernel; the split form's shrink ahead of our GEMM)
    ("lora_ours", ("fused_lora_kernel", "_gemm_shrink_kernel")),
    # Our base GEMM with the LoRA inside (HI_MOE_LORA_FUSED_GEMM): a GEMM and a LoRA at once.
    ("gemm_lora", ("_gemm_lora_kernel",)),
    # torch.compile's own kernels take the names of the ops around them
    # (``triton_red_fused_..._rms_norm_gemm_lora_linear_2``): not LoRA kernels.
    ("other", ("triton_poi_", "triton_red_", "triton_per_")),
    ("lora_vllm", ("_lora_shrink", "_lora_expand", "sgmv", "bgmv", "lora")),
    ("attention", ("flash", "fmha", "attn", "attention")),
    ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "sm90_", "cublas", "matmul")),
)
CATEGORIES = ("lora_ours", "gemm_lora", "lora_vllm", "gemm", "attention", "copy", "other")
#: Host-side LoRA ops (torch custom ops, recorded as ``cpu_op``), by category.
HOST_LORA_OPS = {
    "hi_moe_lora::lora_linear": "lora_ours",
    # (the fused GEMM's op: the base GEMM and its LoRA; missed until 2026-12-02)
    "hi_moe_lora::gemm_lora_linear": "lora_ours",
    "vllm::lora_shrink": "lora_vllm",
    "vllm::lora_expand": "lora_vllm",
}


def kernel_category(name: str, trace_category: str) -> str:
    if trace_category != "kernel":
        return "copy"
    lowered = name.lower()
    for category, needles in KERNEL_CATEGORIES:
        if any(n.lower() in lowered for n in needles):
            return category
    return "other"


@dataclass
class Step:
    context_tokens: int
    generation_tokens: int
    cpu_start: float
    host: float = 0.0
    thread: tuple[object, object] = (None, None)
    lora_host: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    lora_calls: int = 0
    #: host time of the step's outermost CPU events, by name: (µs, calls)
    host_ops: dict[str, list[float]] = field(default_factory=dict)
    busy: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    kernels: int = 0
    gpu_start: float = float("inf")
    gpu_end: float = 0.0
    other_names: Counter[str] = field(default_factory=Counter)
    #: (start, end, name) of each GPU activity, for the idle gaps between them
    activities: list[tuple[float, float, str]] = field(default_factory=list)

    def idle_gaps(self) -> dict[str, float]:
        """The step's idle GPU time inside its span, by the pair of activities around each gap
        ("before -> after", names cut to 40 characters): time no activity of the step ran,
        between the end of everything started so far and the next start."""
        gaps: dict[str, float] = defaultdict(float)
        ordered = sorted(self.activities)
        if not ordered:
            return gaps
        reached, previous = ordered[0][1], ordered[0][2]
        for start, end, name in ordered[1:]:
            if start > reached:
                gaps[f"{previous[:40]} -> {name[:40]}"] += start - reached
            if end >= reached:
                reached, previous = end, name
        return gaps


def load_steps(trace_path: Path) -> list[Step]:
    """The trace's steps in order, each with the GPU activity it launched."""
    opener = gzip.open if trace_path.suffix == ".gz" else open
    with opener(trace_path, "rt") as handle:
        events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
    steps: list[Step] = []
    for ev in events:
        match = STEP_PATTERN.match(str(ev.get("name", "")))
        if match and ev.get("ph") == "X" and ev.get("cat") != "gpu_user_annotation":
            steps.append(
                Step(
                    int(match.group(2)),
                    int(match.group(4)),
                    cpu_start=float(ev["ts"]),
                    host=float(ev.get("dur", 0.0)),
                    thread=(ev.get("pid"), ev.get("tid")),
                )
            )
    steps.sort(key=lambda s: s.cpu_start)
    starts = [s.cpu_start for s in steps]
    _charge_host_lora_ops(events, steps, starts)
    _charge_outermost_host_events(events, steps, starts)
    launch_ts = {
        ev["args"]["correlation"]: float(ev["ts"])
        for ev in events
        if ev.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in ev.get("args", {})
    }
    for ev in events:
        if ev.get("cat") not in GPU_CATEGORIES or ev.get("ph") != "X":
            continue
        ts = launch_ts.get(ev.get("args", {}).get("correlation"))
        index = bisect.bisect_right(starts, ts) - 1 if ts is not None else -1
        if index < 0:
            continue
        step = steps[index]
        category = kernel_category(str(ev["name"]), str(ev["cat"]))
        duration = float(ev.get("dur", 0.0))
        step.busy[category] += duration
        step.kernels += 1
        step.gpu_start = min(step.gpu_start, float(ev["ts"]))
        step.gpu_end = max(step.gpu_end, float(ev["ts"]) + duration)
        step.activities.append((float(ev["ts"]), float(ev["ts"]) + duration, str(ev["name"])))
        if category == "other":
            step.other_names[str(ev["name"])[:80]] += round(duration)
    return [s for s in steps if s.kernels]


def _charge_host_lora_ops(
    events: list[dict[str, Any]], steps: list[Step], starts: list[float]
) -> None:
    """Add each LoRA op's host time to the step whose annotation holds it (same thread)."""
    for ev in events:
        category = HOST_LORA_OPS.get(str(ev.get("name", "")))
        if category is None or ev.get("ph") != "X":
            continue
        index = _holding_step(ev, steps, starts)
        if index is None:
            continue
        steps[index].lora_host[category] += float(ev.get("dur", 0.0))
        steps[index].lora_calls += 1


def _holding_step(ev: dict[str, Any], steps: list[Step], starts: list[float]) -> int | None:
    """The index of the step whose annotation holds this host event (its thread, inside its
    host time), or None."""
    ts = float(ev["ts"])
    index = bisect.bisect_right(starts, ts) - 1
    if index < 0:
        return None
    step = steps[index]
    if (ev.get("pid"), ev.get("tid")) != step.thread or ts > step.cpu_start + step.host:
        return None
    return index


#: CPU-side events whose host time :func:`_charge_outermost_host_events` charges.
HOST_EVENT_CATEGORIES = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
#: The name under which a step's host time outside its outermost events is filed.
BETWEEN_EVENTS = "(between events: Python)"


def _charge_outermost_host_events(
    events: list[dict[str, Any]], steps: list[Step], starts: list[float]
) -> None:
    """Charge each step's outermost CPU events (not inside another event of its thread) to it
    by name, and the rest of its host time to :data:`BETWEEN_EVENTS`."""
    by_step: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for ev in events:
        if ev.get("ph") != "X" or ev.get("cat") not in HOST_EVENT_CATEGORIES:
            continue
        if STEP_PATTERN.match(str(ev.get("name", ""))):
            continue
        index = _holding_step(ev, steps, starts)
        if index is not None:
            by_step[index].append(
                (float(ev["ts"]), float(ev.get("dur", 0.0)), str(ev.get("name", ""))[:60])
            )
    for index, spans in by_step.items():
        step = steps[index]
        reached, charged = step.cpu_start, 0.0
        for ts, duration, name in sorted(spans):
            if ts < reached:  # (inside an outer event already charged)
                continue
            entry = step.host_ops.setdefault(name, [0.0, 0.0])
            entry[0] += duration
            entry[1] += 1
            charged += duration
            reached = ts + duration
        step.host_ops[BETWEEN_EVENTS] = [max(step.host - charged, 0.0), 0.0]


def _top_host_events(group: list[Step], count: int = 10) -> list[tuple[str, float, float]]:
    """The heaviest outermost host events over ``group``: (name, µs a step, calls a step)."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for step in group:
        for name, (micros, calls) in step.host_ops.items():
            totals[name][0] += micros
            totals[name][1] += calls
    ranked = sorted(totals.items(), key=lambda item: -item[1][0])[:count]
    return [(name, round(t / len(group), 1), round(c / len(group), 1)) for name, (t, c) in ranked]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


#: vLLM's largest CUDA graph by default (tokens): larger steps run without one.
GRAPH_MAX_TOKENS = 512


def summarize(steps: list[Step], graph_max_tokens: int = GRAPH_MAX_TOKENS) -> dict[str, Any]:
    """Medians (µs) per group of steps; the first and last steps are dropped (cut by the
    profiler's start and stop)."""
    periods = {id(a): b.gpu_start - a.gpu_start for a, b in itertools.pairwise(steps)}
    inner = steps[1:-1]
    mixed = [s for s in inner if s.context_tokens > 0]
    groups = {
        "decode": [s for s in inner if s.context_tokens == 0],
        "mixed": [s for s in mixed if s.context_tokens + s.generation_tokens <= graph_max_tokens],
        "mixed-large": [
            s for s in mixed if s.context_tokens + s.generation_tokens > graph_max_tokens
        ],
    }
    summary: dict[str, Any] = {}
    for name, group in groups.items():
        if not group:
            continue
        others: Counter[str] = Counter()
        step_gaps = [s.idle_gaps() for s in group]
        gaps: dict[str, float] = defaultdict(float)
        for s, its_gaps in zip(group, step_gaps, strict=True):
            others.update(s.other_names)
            for pair, micros in its_gaps.items():
                gaps[pair] += micros
        summary[name] = {
            "steps": len(group),
            "tokens": _median([s.context_tokens + s.generation_tokens for s in group]),
            "period": _median([periods[id(s)] for s in group if id(s) in periods]),
            "span": _median([s.gpu_end - s.gpu_start for s in group]),
            "busy": _median([sum(s.busy.values()) for s in group]),
            "idle": _median([sum(its_gaps.values()) for its_gaps in step_gaps]),
            "kernels": _median([float(s.kernels) for s in group]),
            "host": _median([s.host for s in group]),
            "lora_host": _median([sum(s.lora_host.values()) for s in group]),
            "lora_calls": _median([float(s.lora_calls) for s in group]),
            **{c: _median([s.busy.get(c, 0.0) for s in group]) for c in CATEGORIES},
            "top_other": [(n, round(t / len(group), 1)) for n, t in others.most_common(8)],
            "top_host": _top_host_events(group),
            "top_gaps": [
                (n, round(t / len(group), 1))
                for n, t in sorted(gaps.items(), key=lambda item: -item[1])[:8]
            ],
        }
    return summary


def table(label: str, summary: dict[str, Any]) -> list[str]:
    timed = ("period", "span", "busy", "idle", *CATEGORIES, "host", "lora_host")
    head = ["label", "group", "steps", "tokens", *timed, "lora_calls"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for group, row in summary.items():
        cells = [label, group, str(row["steps"]), f"{row['tokens']:.0f}"]
        cells += [f"{row.get(k, 0.0):.0f}" for k in (*timed, "lora_calls")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


#: The categories a LoRA step's GEMMs and LoRA kernels fall in (the base step's are ``gemm``).
GEMM_AND_LORA = ("lora_ours", "gemm_lora", "lora_vllm", "gemm")


def lora_time(row: dict[str, Any], base_row: dict[str, Any]) -> float:
    """What LoRA costs a step: its GEMMs and LoRA kernels' GPU time less the base step's GEMMs'
    (the fused GEMM carries the base GEMM's work and the adapters' together)."""
    return sum(row.get(c, 0.0) for c in GEMM_AND_LORA) - base_row.get("gemm", 0.0)


def decode_ratios(summaries: dict[str, Any], base: str) -> list[str]:
    """One line per label of ``summaries`` (a ``--json`` file's content) with decode steps:
    the base label's decode period and busy time over the label's, and the label's LoRA time
    (:func:`lora_time`)."""
    if base not in summaries or "decode" not in summaries[base]:
        raise ValueError(f"no decode steps under the base label {base!r}")
    ref = summaries[base]["decode"]
    lines = []
    for label, summary in summaries.items():
        row = summary.get("decode")
        if label == base or row is None:
            continue
        lines.append(
            f"{label}: decode step {row['period']:.0f} µs, {ref['period'] / row['period']:.3f} of "
            f"{base}'s; GPU busy {row['busy']:.0f} µs, {ref['busy'] / row['busy']:.3f}; "
            f"idle {row.get('idle', 0.0):.0f} µs (base {ref.get('idle', 0.0):.0f}); "
            f"LoRA {lora_time(row, ref):.0f} µs"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trace", type=Path, nargs="?")
    parser.add_argument("--label", default="")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--graph-max-tokens", type=int, default=GRAPH_MAX_TOKENS,
        help="the server's largest CUDA graph size: larger mixed steps are 'mixed-large'",
    )  # fmt: skip
    parser.add_argument("--ratios", type=Path, help="a --json file: its loads against --base")
    parser.add_argument("--base", help="the base load's label in the --ratios file")
    args = parser.parse_args()
    if args.ratios is not None:
        if args.base is None:
            parser.error("--ratios needs --base")
        try:
            print("\n".join(decode_ratios(json.loads(args.ratios.read_text()), args.base)))
        except ValueError as error:
            parser.error(str(error))
        return 0
    if args.trace is None:
        parser.error("a trace to summarize, or --ratios with --base")
    summary = summarize(load_steps(args.trace), args.graph_max_tokens)
    print("\n".join(table(args.label or args.trace.name, summary)))
    for group, row in summary.items():
        print(f"{group}: heaviest other kernels (µs per step):")
        for name, micros in row["top_other"]:
            print(f"  {micros:8.1f}  {name}")
        print(f"{group}: largest idle gaps between two activities (µs per step):")
        for name, micros in row["top_gaps"]:
            print(f"  {micros:8.1f}  {name}")
        print(f"{group}: heaviest outermost host events (µs per step, calls per step):")
        for name, micros, calls in row["top_host"]:
            print(f"  {micros:8.1f}  {calls:6.1f}  {name}")
    if args.json:  # one file per server: each trace adds (or replaces) its label's entry
        known = json.loads(args.json.read_text()) if args.json.exists() else {}
        known[args.label or args.trace.name] = summary
        args.json.write_text(json.dumps(known, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
