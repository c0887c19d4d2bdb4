"""Registers, stack (spills) and compile time of the fused GEMM's kernels, compiled on the CPU.

No GPU needed: each shipped plan's LoRA tile (``gemm_tiles.json``, one GPU's plans; another
table with ``--table``) is compiled
for sm_90 by Triton's bundled ptxas, in the split forms a step of several adapters launches
(:data:`hi_moe_lora.kernels.gemm_compile.ExpandForm`), at each slot rank (``--max-lora-rank``)
asked for, as a step that may hold a fused slot launches it and as one known to serve several
adapters (``may_fuse``), its arguments specialised as a served call's variant's are (before the
twenty-ninth window they were not, and every kernel showed 255 registers and 160-1,760 bytes of
stack that no served variant has). ``cuobjdump -res-usage`` gives registers and stack bytes a
thread (:func:`.spill_report.resource_usage`). The compile time is a cold one: every kernel compiles
into a fresh Triton cache, as a served model's first start does during graph capture.

    python benchmarks/kernels/gemm_spill_report.py [--slot-ranks 16 64] [--forms inside ahead]
        [--device "NVIDIA H200"] [--shapes 6144x4096 ...] [--few-rows 8] [--table TABLE]

``--few-rows ROWS`` reports instead the kernels of calls of ``ROWS`` rows below the fused GEMM's
least (1-32): each plan's ``few_rows`` tile (its LoRA tile where it names none) in its
``few_rows`` route's form, compiled as such a call launches it (no fused slot: one adapter goes
over the whole work list too); plans without ``few_rows`` are left out.

Shapes whose plans share a tile share its rows (their kernels are the same). Compile times are
of this machine's CPU (a 2-core one in the twenty-second window), so compare rows of one run
only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.kernels.spill_report import resource_usage
from hi_moe_lora.kernels.gemm_compile import ROUTE_FORMS, ExpandForm, compile_gemm_for_target
from hi_moe_lora.kernels.gemm_lora import FUSED_GEMM_ROWS
from hi_moe_lora.kernels.gemm_tiles import (
    TABLE_FILE,
    GemmPlan,
    GemmTile,
    few_rows_route,
    load_table,
)

#: The forms a step of several adapters launches (``none``: a one-adapter or plain launch).
FORMS = ("none", "ahead", "inside", "beside")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=TABLE_FILE, help="default: the shipped one")
    parser.add_argument("--device", default="NVIDIA H200", help="whose plans (the table's key)")
    parser.add_argument("--shapes", nargs="+", help="shape keys (default: every planned one)")
    parser.add_argument("--slot-ranks", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--forms", nargs="+", default=["inside", "ahead"], choices=FORMS)
    parser.add_argument(
        "--may-fuse", nargs="+", default=["yes", "no"], choices=["yes", "no"],
        help="compile as a step that may hold a fused slot (yes), as one known not to (no)",
    )  # fmt: skip
    parser.add_argument(
        "--few-rows", type=int, metavar="ROWS",
        help="the kernels of calls of ROWS rows (1-32) on each plan's few_rows tile and route",
    )  # fmt: skip
    args = parser.parse_args(argv)
    least = FUSED_GEMM_ROWS[0]
    if args.few_rows is not None and not 1 <= args.few_rows < least:
        parser.error(f"--few-rows is from 1 to {least - 1} rows (below the fused GEMM's least)")
    plans = read_plans(parser, args.table, args.device)
    if not plans:
        parser.error(f"{args.table} holds no plans for {args.device!r}")
    unknown = set(args.shapes or ()) - set(plans)
    if unknown:
        parser.error(f"not planned for {args.device}: {', '.join(sorted(unknown))}")
    os.environ.pop("TRITON_INTERPRET", None)  # (compile, do not interpret)
    cache_before = os.environ.get("TRITON_CACHE_DIR")
    try:
        _report(plans, args)
    finally:
        if cache_before is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = cache_before
    return 0


def read_plans(parser: argparse.ArgumentParser, table: Path, device: str) -> dict[str, GemmPlan]:
    """``device``'s plans in ``table`` (none where it has none); a file that is not a tile
    table ends the run with the parser's error."""
    try:
        return load_table(table).get(device, {})
    except (OSError, ValueError) as error:
        parser.error(f"{table}: not a tile table ({error})")


def kernels_to_compile(
    plans: dict[str, GemmPlan], args: argparse.Namespace
) -> dict[tuple[GemmTile, ExpandForm, bool], list[str]]:
    """``{(tile, form, may fuse): shape keys}`` for the asked shapes: each plan's LoRA tile in
    every asked form and ``may_fuse``, or with ``--few-rows`` its few-rows tile in its few-rows
    route's form, no fused slot (shapes of one kernel share its rows)."""
    kernels: dict[tuple[GemmTile, ExpandForm, bool], list[str]] = {}
    for key, plan in plans.items():
        if args.shapes and key not in args.shapes:
            continue
        if args.few_rows is None:
            for form in args.forms:
                for may_fuse in args.may_fuse:
                    kernels.setdefault((plan.lora_tile, form, may_fuse == "yes"), []).append(key)
        elif (routed := few_rows_route(plan)) is not None:
            form = ROUTE_FORMS[routed.several]
            kernels.setdefault((routed.lora_tile, form, False), []).append(key)
    return kernels


def _report(plans: dict[str, GemmPlan], args: argparse.Namespace) -> None:
    """One row a compiled kernel, each into a fresh cache (``TRITON_CACHE_DIR``)."""
    rows = 64 if args.few_rows is None else args.few_rows  # (the tiles' measured rows)
    print("| shape | tile | rows | slot rank | form | may fuse | regs | stack B | compile s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (tile, form, may_fuse), keys in kernels_to_compile(plans, args).items():
        key = ", ".join(keys)
        label = f"n{tile.block_n} k{tile.block_k} s{tile.stages} w{tile.warps} x{tile.split_k}"
        for slot_rank in args.slot_ranks:
            with tempfile.TemporaryDirectory() as cache:
                os.environ["TRITON_CACHE_DIR"] = cache
                began = time.perf_counter()
                kernel = compile_gemm_for_target(
                    tile, form, slot_rank=slot_rank, may_fuse=may_fuse, rows=rows
                )
                seconds = time.perf_counter() - began
                regs, stack = resource_usage(kernel.asm["cubin"])
            print(
                f"| {key} | {label} | {rows} | {slot_rank} | {form} | "
                f"{'yes' if may_fuse else 'no'} | {regs} | {stack} | {seconds:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
