"""A served decode step's GEMMs beside the floor their weights' bytes set (GPU benchmark
analysis; runs anywhere on a ``step_profile.py --json`` file).

At decode a Llama-3-8B-shaped model's projections and LM head are bound by reading their
weights: a step reads every weight once, whatever its few rows. So the GEMM and LoRA GPU time of
a step (``step_profile.py``'s ``gemm``, ``gemm_lora``, ``lora_ours`` and ``lora_vllm``) has a
floor: the bytes of the 32 layers' projections and the LM head, plus the A and B of every
distinct adapter in the step, at the card's bandwidth. This puts each load's time beside that
floor (the share of the bandwidth it reaches), the LoRA bytes' own part, and, for a target ratio
of the base step's GPU busy time, the LoRA time the target leaves against the time measured.

    python3 benchmarks/kernels/step_floor.py STEPS.json --base ours-auto-spec-r16-base \\
        --adapters ours-auto-spec-r16-one=1 ours-auto-spec-r16-many=16 --target 0.95 0.90

``--adapters LABEL=N``: the adapters the load's traffic spreads over, uniformly; a decode step of
T rows then holds N (1 - (1 - 1/N)^T) distinct adapters on average. ``--bandwidth`` is the
card's in TB/s (4.8: H200; 3.35: H100 SXM). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.kernels.llama_shapes import HIDDEN, PROJECTIONS
from benchmarks.kernels.step_profile import GEMM_AND_LORA, lora_time

LAYERS = 32
VOCAB = 128256
BYTES_PER_WEIGHT = 2  # bf16


def base_weight_bytes(layers: int = LAYERS, vocab: int = VOCAB) -> int:
    """Bytes a decode step reads for its projections (every layer) and the LM head."""
    per_layer = sum(k * sum(slices) for k, slices in PROJECTIONS.values())
    return (layers * per_layer + vocab * HIDDEN) * BYTES_PER_WEIGHT


def adapter_bytes(rank: int, layers: int = LAYERS) -> int:
    """Bytes of one adapter's A and B on all seven projections (each packed slice has its own A
    of ``rank x K`` and B of ``n x rank``)."""
    per_layer = sum(rank * (k * len(slices) + sum(slices)) for k, slices in PROJECTIONS.values())
    return layers * per_layer * BYTES_PER_WEIGHT


def distinct_adapters(adapters: int, rows: float) -> float:
    """Expected distinct adapters among ``rows`` rows, each on one of ``adapters`` at random."""
    if adapters <= 0:
        return 0.0
    return adapters * (1.0 - (1.0 - 1.0 / adapters) ** rows)


def gemm_time(row: dict[str, Any]) -> float:
    """The step's GEMM and LoRA GPU time, µs."""
    return sum(float(row.get(category, 0.0)) for category in GEMM_AND_LORA)


def floor_rows(
    summaries: dict[str, Any],
    base: str,
    adapters: dict[str, int],
    rank: int,
    bandwidth_tbs: float,
    targets: list[float],
) -> list[dict[str, Any]]:
    """One row per label with decode steps, the base first: GEMM time, floor, share, time over
    the base's GEMMs, the LoRA bytes' part of the floor, and each target's LoRA budget."""
    if base not in summaries or "decode" not in summaries[base]:
        raise ValueError(f"no decode steps under the base label {base!r}")
    if bandwidth_tbs <= 0:
        raise ValueError("the bandwidth must be positive")
    per_us = bandwidth_tbs * 1e6  # bytes a µs
    ref = summaries[base]["decode"]
    base_floor = base_weight_bytes() / per_us
    rows: list[dict[str, Any]] = []
    for label in [base, *(name for name in summaries if name != base)]:
        decode = summaries[label].get("decode")
        if decode is None:
            continue
        distinct = (
            0.0 if label == base else distinct_adapters(adapters.get(label, 0), decode["tokens"])
        )
        lora_floor = distinct * adapter_bytes(rank) / per_us
        measured = gemm_time(decode)
        rows.append(
            {
                "label": label,
                "tokens": decode["tokens"],
                "distinct_adapters": distinct,
                "gemm_us": measured,
                "floor_us": base_floor + lora_floor,
                "share": (base_floor + lora_floor) / measured if measured else 0.0,
                "over_base_us": lora_time(decode, ref),
                "lora_bytes_us": lora_floor,
                "busy_ratio": ref["busy"] / decode["busy"],
                "budget_us": {t: ref["busy"] / t - ref["busy"] for t in targets},
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], targets: list[float], bandwidth_tbs: float) -> str:
    head = [
        "load",
        "rows",
        "distinct adapters",
        "GEMMs + LoRA µs",
        f"bytes at {bandwidth_tbs:g} TB/s µs",
        "share",
        "over the base µs",
        "LoRA bytes µs",
        "busy ratio",
        *(f"LoRA budget at {t:g} µs" for t in targets),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [
            row["label"],
            f"{row['tokens']:.0f}",
            f"{row['distinct_adapters']:.1f}",
            f"{row['gemm_us']:.0f}",
            f"{row['floor_us']:.0f}",
            f"{row['share']:.3f}",
            f"{row['over_base_us']:.0f}",
            f"{row['lora_bytes_us']:.0f}",
            f"{row['busy_ratio']:.3f}",
            *(f"{row['budget_us'][t]:.0f}" for t in targets),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _adapters(values: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        label, sep, count = value.rpartition("=")
        if not sep or not label or not count.isdigit():
            raise ValueError(f"--adapters takes LABEL=N, got {value!r}")
        counts[label] = int(count)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("steps", type=Path, help="a step_profile.py --json file")
    parser.add_argument("--base", required=True, help="the base model's label in it")
    parser.add_argument("--adapters", nargs="*", default=[], metavar="LABEL=N")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--bandwidth", type=float, default=4.8, help="TB/s (H200: 4.8)")
    parser.add_argument("--target", type=float, nargs="*", default=[0.95, 0.90])
    args = parser.parse_args(argv)
    try:
        rows = floor_rows(
            json.loads(args.steps.read_text()),
            args.base,
            _adapters(args.adapters),
            args.rank,
            args.bandwidth,
            args.target,
        )
    except ValueError as error:
        parser.error(str(error))
    print(markdown(rows, args.target, args.bandwidth))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
