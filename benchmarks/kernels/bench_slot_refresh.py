"""What a new adapter in a slot costs our wrapper: the rank refresh, scanned in one launch or
tensor by tensor (GPU; on the CPU a check of the script only).

When vLLM puts an adapter into a slot, the wrapper's ``update_metadata`` recomputes that slot's
real rank over every stacked ``A`` of the model (:mod:`hi_moe_lora.kernels.ranks`) before the
step that first serves it. Under slot churn that happens several times a second. This times
:meth:`SlotRanks.refresh` for ``--changed`` new adapters on the Llama-3-8B shape (32 layers, 224
stacked ``A`` tensors, 16 slots at ``--max-rank``), the way the wrapper calls it (host wall
time, the copy of the ranks to the host included, with the GPU idle before each call):

- ``one_launch``: :mod:`hi_moe_lora.kernels.rank_scan` (the default on CUDA);
- ``per_tensor``: the tensor-by-tensor detection (the CPU path, and CUDA's before).

Rounds interleave the two; medians. With ``--narrow-b`` (under ``--max-rank`` above 16) the
refresh also rewrites the slots' narrow copies of the 224 stacked ``B`` tensors
(:mod:`hi_moe_lora.kernels.narrow_b`; one launch: :mod:`hi_moe_lora.kernels.narrow_copy`), as it
does when served; the script checks that both methods leave the same copies.

    python benchmarks/kernels/bench_slot_refresh.py [--changed 1 4 16] [--max-rank 16]
        [--narrow-b] [--rounds 20] [--out refresh.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

LAYERS, SLOTS, HIDDEN, INTERMEDIATE = 32, 16, 4096, 14336
#: per layer, the input width of each stacked A (q, k, v, o, gate, up, down)
A_WIDTHS = (HIDDEN,) * 6 + (INTERMEDIATE,)
#: per layer, the output width of each stacked B (grouped-query k and v: 8 of 32 heads)
B_HEIGHTS = (HIDDEN, HIDDEN // 4, HIDDEN // 4, HIDDEN, INTERMEDIATE, INTERMEDIATE, HIDDEN)
METHODS = ("one_launch", "per_tensor")


def stacked_a(layers: int, max_rank: int, device: str, dtype: Any) -> list[Any]:
    """Every stacked A of the model, each slot holding a rank-``max_rank`` adapter (worst case:
    the scan reads every row)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    return [
        torch.randn(SLOTS, 1, max_rank, width, generator=gen, device=device).to(dtype)
        for _ in range(layers)
        for width in A_WIDTHS
    ]


def stacked_b(layers: int, max_rank: int, device: str, dtype: Any) -> list[Any]:
    """Every stacked B of the model, random in every rank column."""
    import torch

    gen = torch.Generator(device=device).manual_seed(1)
    return [
        torch.randn(SLOTS, 1, height, max_rank, generator=gen, device=device).to(dtype)
        for _ in range(layers)
        for height in B_HEIGHTS
    ]


def time_refresh(tracker: Any, changed: int, round_index: int, synchronize: Any) -> float:
    """Seconds for one refresh in which ``changed`` slots hold new adapter ids."""
    ids = [(round_index + 1) * 1000 + s if s < changed else s + 1 for s in range(SLOTS)]
    synchronize()
    began = time.perf_counter()
    tracker.refresh(ids)
    return time.perf_counter() - began


def measure(
    changed_counts: list[int],
    max_rank: int,
    rounds: int,
    device: str,
    layers: int,
    narrow_b: bool = False,
) -> list[dict[str, Any]]:
    import torch

    from hi_moe_lora.kernels.ranks import SlotRanks

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    weights = stacked_a(layers, max_rank, device, dtype)
    b_weights = stacked_b(layers, max_rank, device, dtype) if narrow_b else []
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    trackers = {}
    for method in METHODS:
        tracker = SlotRanks(
            SLOTS, max_rank, device, narrow_b=narrow_b, one_launch=method == "one_launch"
        )
        tracker.observe(weights, b_weights)
        tracker.refresh(list(range(1, SLOTS + 1)))  # first sight: every slot, and compiles
        trackers[method] = tracker
    results = []
    for changed in changed_counts:
        times: dict[str, list[float]] = {method: [] for method in METHODS}
        for index in range(rounds):
            for method in METHODS:
                times[method].append(time_refresh(trackers[method], changed, index, synchronize))
        host = [trackers[method].host for method in METHODS]
        if host[0] != host[1] or host[0] != [max_rank] * SLOTS:
            raise AssertionError(f"the methods disagree on the ranks: {host}")
        copies = [trackers[method].narrow_b.copies_of(b_weights) or [] for method in METHODS]
        if len(copies[0]) != len(b_weights) or not all(
            torch.equal(one, other) for one, other in zip(*copies, strict=True)
        ):
            raise AssertionError("the methods left different narrow copies of B")
        results.append(
            {
                "changed": changed,
                "ms_per_refresh": {
                    m: round(1e3 * statistics.median(t), 3) for m, t in times.items()
                },
            }
        )
    return results


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| new adapters in a refresh | " + " | ".join(f"{m}, ms" for m in METHODS) + " |",
        "|---|" + "---|" * len(METHODS),
    ]
    for row in results:
        cells = " | ".join(f"{row['ms_per_refresh'][m]:.2f}" for m in METHODS)
        lines.append(f"| {row['changed']} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changed", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--max-rank", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--narrow-b", action="store_true", help="refresh B's narrow copies too (max rank > 16)"
    )
    parser.add_argument("--layers", type=int, default=LAYERS, help="fewer for a CPU check")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if any(not 1 <= c <= SLOTS for c in args.changed):
        parser.error(f"--changed takes 1 to {SLOTS}")
    if args.narrow_b and args.max_rank <= 16:
        parser.error("--narrow-b needs --max-rank above 16 (B has no narrow copies below)")
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = measure(
        args.changed, args.max_rank, args.rounds, device, args.layers, narrow_b=args.narrow_b
    )
    summary = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (script check)",
        "max_rank": args.max_rank,
        "narrow_b": args.narrow_b,
        "layers": args.layers,
        "rounds": args.rounds,
        "results": results,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
