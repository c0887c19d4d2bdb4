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

With ``--table [TABLE]`` instead of a results file (the shipped ``gemm_tiles.json`` when no
path follows), the same figures for each plan's few-rows tile (its LoRA tile where it names
none) at each of ``--rows`` (default 8, 16, 32: the counts one few-rows tile serves), with the
kernel's stack bytes and its waves (the GEMM's programs over the slots, rounded up), no timing:
a tile whose programs need a second wave at some count, or leave no helper an SM, shows here
before any device time is spent (gate_up's 8-row tile took 448 programs in 264 slots at 16 and
32 rows, and 79-84 µs a call against cuBLAS then our launch's 66-68; thirty-first window):

    python benchmarks/kernels/helper_residency.py --table [TABLE] [--rows 8 16 32]
        [--device "NVIDIA H200"]

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

from benchmarks.kernels.gemm_spill_report import read_plans
from benchmarks.kernels.spill_report import resource_usage
from hi_moe_lora.kernels.gemm_compile import ROUTE_FORMS, ExpandForm, compile_gemm_for_target
from hi_moe_lora.kernels.gemm_lora import FUSED_GEMM_ROWS
from hi_moe_lora.kernels.gemm_tiles import TABLE_FILE, GemmPlan, GemmTile, few_rows_route

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


def waves(gemm_programs: int, slots: int) -> int:
    """How many times the GEMM's programs fill the slots, the last time perhaps in part."""
    return -(-gemm_programs // slots)


def placement(n: int, tile: GemmTile, programs: int, sms: int) -> tuple[int, int]:
    """(the GEMM's programs, slots) of a launch on ``tile`` over ``n`` columns, ``programs``
    of it an SM (:func:`programs_an_sm`) on ``sms`` SMs."""
    return n // tile.block_n * tile.split_k, programs * sms


def _tile_label(tile: GemmTile) -> str:
    return (
        f"{tile.block_n} x {tile.block_k} x {tile.stages}, {tile.warps} warps, split {tile.split_k}"
    )


def few_rows_kernels(plans: dict[str, GemmPlan]) -> list[tuple[str, GemmTile, ExpandForm]]:
    """(shape key, tile, form) of each plan's few-rows kernel: its ``few_rows`` tile (the LoRA
    tile where it names none) in its ``few_rows`` route's form; plans without one are left out."""
    kernels = []
    for key, plan in plans.items():
        if (routed := few_rows_route(plan)) is not None:
            kernels.append((key, routed.lora_tile, ROUTE_FORMS[routed.several]))
    return kernels


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


def _kernel_usage(tile: GemmTile, rows: int, form: ExpandForm = "inside") -> tuple[int, int, int]:
    """(registers a thread, stack bytes a thread, shared bytes) of the kernel in ``form`` (the
    one launch's by default) at ``rows`` rows, as a step of several adapters launches it."""
    kernel = compile_gemm_for_target(tile, form, may_fuse=False, rows=rows)
    registers, stack = resource_usage(kernel.asm["cubin"])
    return registers, stack, int(kernel.metadata.shared)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("results", type=Path, nargs="?", help="a tune_few_rows.py --results file")
    source.add_argument(
        "--table", type=Path, nargs="?", const=TABLE_FILE, metavar="TABLE",
        help="each plan's few-rows kernel of a tile table instead (default: the shipped one)",
    )  # fmt: skip
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 16, 32], help="with --table")
    parser.add_argument("--device", default="NVIDIA H200", help="whose plans, with --table")
    parser.add_argument("--sms", type=int, default=132, help="the GPU's SMs (H200: 132)")
    args = parser.parse_args(argv)
    if args.sms < 1:
        parser.error("--sms is at least 1")
    if args.table is not None:
        return _table_report(parser, args)
    try:
        costs = lora_costs(json.loads(args.results.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as error:
        parser.error(f"{args.results}: not a tune_few_rows.py results file ({error})")
    os.environ.pop("TRITON_INTERPRET", None)  # (compile, do not interpret)
    usage: dict[tuple[GemmTile, int], tuple[int, int, int]] = {}
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
        registers, _, shared = usage[tile, cost["m"]]
        fit = programs_an_sm(registers, shared, tile.warps)
        gemm, slots = placement(cost["n"], tile, fit, args.sms)
        resident = helpers_resident(gemm, args.sms, slots)
        kind = "all" if resident == args.sms else "none" if resident == 0 else "some"
        by_class[kind].append(cost["one"])
        print(
            f"| {cost['shape']} | {cost['m']} | {_tile_label(tile)} | {registers} | "
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


def _table_report(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Each plan's few-rows kernel of ``--table`` at each of ``--rows``: resources, waves and
    the helpers resident at the start (only the one launch has helpers)."""
    least = FUSED_GEMM_ROWS[0]
    if not all(1 <= rows < least for rows in args.rows):
        parser.error(f"--rows are from 1 to {least - 1} (below the fused GEMM's least)")
    kernels = few_rows_kernels(read_plans(parser, args.table, args.device))
    if not kernels:
        parser.error(f"{args.table} holds no few-rows plan for {args.device!r}")
    os.environ.pop("TRITON_INTERPRET", None)  # (compile, do not interpret)
    print(
        "| shape | rows | tile | form | regs | stack B | shared KiB | programs an SM "
        "| GEMM programs | slots | waves | helpers resident at the start |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key, tile, form in kernels:
        n = int(key.split("x")[0])
        for rows in args.rows:
            registers, stack, shared = _kernel_usage(tile, rows, form)
            fit = programs_an_sm(registers, shared, tile.warps)
            gemm, slots = placement(n, tile, fit, args.sms)
            helpers = str(helpers_resident(gemm, args.sms, slots)) if form == "inside" else "-"
            print(
                f"| {key} | {rows} | {_tile_label(tile)} | {form} | {registers} | "
                f"{stack} | {shared / 1024:.0f} | {fit} | {gemm} | {slots} | "
                f"{waves(gemm, slots)} | {helpers} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
