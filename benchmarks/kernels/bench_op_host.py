"""Host time of one call of our LoRA op's dispatch: direct registration against ``custom_op``.

vLLM runs a step larger than its largest CUDA graph op by op, so every layer's LoRA op costs
its host time there (128 calls a step on the Llama-3-8B shape; benchmarks/README.md, "fifth
window"). This times what a call costs before any kernel work: the op called with vLLM's
no-LoRA flag set, which returns after the rank tracker's check, so the figure is dispatch plus
that check. Side by side, in one process, rounds interleaved:

- ``library``: ``torch.ops.hi_moe_lora.lora_linear`` as the package registers it
  (:mod:`hi_moe_lora.kernels.op_registry`);
- ``custom_op``: the same Python function registered with ``torch.library.custom_op`` (how the
  package registered it until 2026-11-27), under the benchmark's own namespace;
- ``function``: the Python function called directly (the floor).

    python benchmarks/kernels/bench_op_host.py [--device cuda] [--calls 20000] [--rounds 5]
        [--out host.json]

Arguments have the Llama-3-8B gate_up shape: 16 slots, rank 16, two slices of 14,336 outputs,
64 tokens (no kernel runs, so the sizes only matter to the tracker's bookkeeping).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hi_moe_lora.kernels import ops
from hi_moe_lora.kernels.op_registry import writes_in_place
from hi_moe_lora.kernels.ranks import SlotRanks

SLOTS, RANK, HIDDEN, SLICE_OUT, TOKENS = 16, 16, 4096, 14336, 64
BENCH_OP = "hi_moe_lora_bench::lora_linear"


@functools.cache  # registered once per process
def _custom_op_twin() -> Callable[..., None]:
    """The package's op function, registered the old way (``torch.library.custom_op``)."""
    twin = torch.library.custom_op(BENCH_OP, mutates_args=("y", "counters"))(ops.lora_linear_impl)
    twin.register_fake(writes_in_place)
    return torch.ops.hi_moe_lora_bench.lora_linear  # type: ignore[no-any-return]


def op_arguments(device: str) -> tuple[Any, ...]:
    """One gate_up call's arguments, vLLM's no-LoRA flag set (nothing launches)."""
    dtype = torch.bfloat16
    lora_a = [torch.zeros(SLOTS, 1, RANK, HIDDEN, dtype=dtype, device=device) for _ in range(2)]
    lora_b = [torch.zeros(SLOTS, 1, SLICE_OUT, RANK, dtype=dtype, device=device) for _ in range(2)]
    tracker = SlotRanks(SLOTS, RANK, device)
    work = torch.zeros(4096, dtype=torch.int32, device=device)
    return (
        torch.zeros(TOKENS, 2 * SLICE_OUT, dtype=dtype, device=device),
        torch.zeros(TOKENS, HIDDEN, dtype=dtype, device=device),
        lora_a,
        lora_b,
        work,
        work,
        tracker.ranks,
        torch.zeros(4096, dtype=torch.int32, device=device),
        torch.tensor([True]),  # vLLM's no_lora_flag_cpu
        1.0,
        0,
        True,
    )


def _per_call_us(call: Callable[..., None], args: tuple[Any, ...], calls: int) -> float:
    call(*args)
    began = time.perf_counter()
    for _ in range(calls):
        call(*args)
    return 1e6 * (time.perf_counter() - began) / calls


def measure(device: str, calls: int, rounds: int) -> dict[str, Any]:
    """Median µs per call of each variant over ``rounds`` interleaved rounds."""
    args = op_arguments(device)
    variants: dict[str, Callable[..., None]] = {
        "library": ops.lora_linear,
        "custom_op": _custom_op_twin(),
        "function": ops.lora_linear_impl,
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for round_index in range(rounds):
        order = list(variants) if round_index % 2 == 0 else list(reversed(variants))
        for name in order:
            samples[name].append(_per_call_us(variants[name], args, calls))
    return {
        "device": device,
        "torch": torch.__version__,
        "calls": calls,
        "rounds": rounds,
        "us_per_call": {name: statistics.median(s) for name, s in samples.items()},
        "samples": samples,
    }


def table(result: dict[str, Any]) -> str:
    us = result["us_per_call"]
    lines = ["| registration | µs per call | ÷ library |", "|---|---|---|"]
    lines += [f"| {n} | {v:.1f} | {v / us['library']:.2f} |" for n, v in us.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = measure(args.device, args.calls, args.rounds)
    print(f"{args.device}, torch {result['torch']}, {args.calls} calls x {args.rounds} rounds")
    print(table(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
