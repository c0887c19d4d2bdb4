"""Whether the one-launch split form's shrink helpers are resident beside the GEMM's programs,
beside what the LoRA cost over the plain GEMM, per tile of a ``tune_few_rows.py`` sweep.

In one launch (:mod:`hi_moe_lora.kernels.gemm_lora`, ``inside``) the grid holds the GEMM's
programs, then one helper program an SM that takes the shrink's jobs. A GPU places programs in
the grid's order while an SM has room, so where the GEMM's programs fill every SM the helpers
start only when a GEMM program has finished, and the GEMM's programs run the shrink's jobs in
their epilogues (the wait takes any job left). This script compiles each timed tile's kernel as
a call of the sweep's rows launches it (CPU only: Triton's ptxas, ``cuobjdump``), works out how
many of its programs an SM holds from its registers, shared memory and warps, and prints, beside
the sweep's one-adapter time less the plain GEMM's on that tile:

- the GEMM's programs (column blocks times K splits) and the slots (programs an SM times SMs),
- how many helpers are resident at the start (the slots the GEMM's programs leave, at most one
  an SM).

    python benchmarks/kernels/helper_residency.py \\
        benchmarks/kernels/results/h200_tune_few_rows_2026-12-02_thirtieth_1.json [--sms 132]

The limits are sm_90's (H100, H200): 65,536 registers, 228 KiB of shared memory (1 KiB of it
reserved a program), 64 warps and 32 programs an SM; registers are allotted a warp at a time in
units of 256.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.kernels.spill_report import resource_usage
from hi_moe_lora.kernels.gemm_compile import compile_gemm_for_target
from hi_moe_lora.kernels.gemm_tiles import GemmTile

#: sm_90's limits an SM.
REGISTERS = 65_536
SHARED_BYTES = 228 * 1024
RESERVED_SHARED_BYTES = 1024
WARPS = 64
PROGRAMS = 32
#: Registers are allotted to a warp in units of this many.
REGISTER_UNIT = 256


def programs_an_sm(registers: int, shared: int, warps: int) -> int:
    """How many programs of a kernel (``registers`` a thread, ``shared`` bytes, ``warps``) one
    SM holds at once."""
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    by_registers = REGISTERS // (per_warp * warps)
    by_shared = SHARED_BYTES // (shared + RESERVED_SHARED_BYTES)
    return min(by_registers, by_shared, WARPS // warps, PROGRAMS)


def helpers_resident(gemm_programs: int, helpers: int, slots: int) -> int:
    """Helpers placed at the start when they come after ``gemm_programs`` in the grid."""
    return max(0, min(helpers, slots - gemm_programs))


def lora_costs(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each tile the sweep timed with LoRA and plain: its shape, rows, tile and the one- and
    several-adapter time over the plain GEMM on it (µs a call)."""
    costs = []
    for row in results["rows"]:
        plain = {tuple(fields[:5]): fields[5] for fields in row["plain"]}
        for fields in row["tiles"]:
            key = tuple(fields[:5])
            if key in plain:
                costs.append({
                    "shape": row["shape"], "n": int(row["key"].split("x")[0]), "m": row["m"],
                    "tile": GemmTile(*key), "one": fields[5] - plain[key],
                    "several": fields[6] - plain[key],
                })  # fmt: skip
    return costs


def _kernel_usage(tile: GemmTile, rows: int) -> tuple[int, int]:
    """(registers a thread, shared bytes) of the one-launch kernel at ``rows`` rows."""
    kernel = compile_gemm_for_target(tile, "inside", may_fuse=False, rows=rows)
    registers, _ = resource_usage(kernel.asm["cubin"])
    return registers, int(kernel.metadata.shared)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a tune_few_rows.py --results file")
    parser.add_argument("--sms", type=int, default=132, help="the GPU's SMs (H200: 132)")
    args = parser.parse_args(argv)
    if args.sms < 1:
        parser.error("--sms is at least 1")
    try:
        costs = lora_costs(json.loads(args.results.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as error:
        parser.error(f"{args.results}: not a tune_few_rows.py results file ({error})")
    os.environ.pop("TRITON_INTERPRET", None)  # (compile, do not interpret)
    usage: dict[tuple[GemmTile, int], tuple[int, int]] = {}
    print(
        "| shape | rows | tile | regs | shared KiB | programs an SM | GEMM programs | slots "
        "| helpers resident at the start | LoRA over plain µs, one / several |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    by_class: dict[str, list[float]] = {"all": [], "some": [], "none": []}
    for cost in sorted(costs, key=lambda c: (c["shape"], c["m"], c["one"])):
        tile: GemmTile = cost["tile"]
        if (tile, cost["m"]) not in usage:
            usage[tile, cost["m"]] = _kernel_usage(tile, cost["m"])
        registers, shared = usage[tile, cost["m"]]
        fit = programs_an_sm(registers, shared, tile.warps)
        gemm = cost["n"] // tile.block_n * tile.split_k
        slots = fit * args.sms
        resident = helpers_resident(gemm, args.sms, slots)
        kind = "all" if resident == args.sms else "none" if resident == 0 else "some"
        by_class[kind].append(cost["one"])
        label = f"{tile.block_n} x {tile.block_k} x {tile.stages}, {tile.warps} warps"
        print(
            f"| {cost['shape']} | {cost['m']} | {label}, split {tile.split_k} | {registers} | "
            f"{shared / 1024:.0f} | {fit} | {gemm} | {slots} | {resident} | "
            f"{cost['one']:.1f} / {cost['several']:.1f} |"
        )
    print()
    for kind, ones in by_class.items():
        if ones:
            print(
                f"helpers resident at the start: {kind}: {len(ones)} tiles, one adapter's LoRA "
                f"over plain median {statistics.median(ones):.1f} µs "
                f"({min(ones):.1f}-{max(ones):.1f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
