"""Is LoRA nearly free inside the base GEMM? A prototype measured against what serving does now.

Issue 20's 64-concurrent target needs LoRA at about 2 µs a projection. Our launch after the base
GEMM costs 7-13 µs whatever its work (benchmarks/README.md, tenth and eleventh windows): its own
chain of dependent round trips. Overlapping it with the GEMM and shortening the chain have been
tried. This benchmark measures the remaining direction, fewer launches: a Triton GEMM that adds
one adapter's LoRA in the same launch. Its K loop multiplies the ``x`` tile it already loaded by
A beside W (``x @ A.T`` costs A's tile, not another pass over ``x``). Its epilogue adds
``(x A.T) B.T`` for its own output columns before the one store.

It times, per projection of the Llama-3-8B shape (one adapter of rank 16, all rows):

- ``cublas``: ``x @ W.T`` by cuBLAS (``torch.mm``), the base layer as vLLM runs it;
- ``cublas+ours``: that, then our fused LoRA launch (``launch_fused_lora``): serving today;
- ``triton``: the prototype with LoRA compiled out: is a Triton GEMM as fast as cuBLAS here?
- ``triton+lora``: the prototype with the adapter in: what LoRA costs inside the GEMM.

Each is the best of a few tile shapes, timed in one CUDA graph over a pool of weight copies
larger than L2 (every call reads W from HBM, as a served step does), median of the replays.
The prototype's output is checked against a float64 reference first. **A prototype, not product
code:** one adapter for all rows (the multi-adapter form would take its token tiles from our
work list), bf16, no quantized bases; serving would need the plugin to replace vLLM's LoRA
linear layers' base ``apply``, which the Punica wrapper does not see.

With ``--product`` it times the product instead (:mod:`hi_moe_lora.kernels.gemm_op`, what
``HI_MOE_LORA_FUSED_GEMM`` serves): the ``hi_moe_lora::gemm_lora_linear`` op with 16 slots of
rank 16 and the projection's real slices, one adapter for all rows or 16 adapters in turn (one
adapter: its LoRA in the GEMM; several: the route the tile plan gives the shape,
:class:`hi_moe_lora.kernels.gemm_tiles.SeveralRoute`), and the op as vLLM's
``--specialize-active-lora`` graphs run it (the count of adapters known). Beside them, each
route on its own: cuBLAS then the ``hi_moe_lora::lora_linear`` op (``ours``, and serving
without the fused GEMM), the fused GEMM then our launch on the rest list (``fused``; the
"before" column), the split form's shrink launch alone, and the op under the flag with the
route for several adapters forced to each split form (``split``: the shrink launched ahead;
``one-launch``: the shrink inside the GEMM's launch; ``shrink-beside``: its helpers in a launch
on a side stream beside the GEMM's). The "few rows" columns time each split form as a call
below the fused GEMM's least rows takes it under a plan's ``few_rows`` with ``one_adapter``:
one adapter's LoRA then goes through the split form over the whole work list, not the fused
slot, several adapters as above.

    python benchmarks/kernels/bench_fused_gemm.py [--ms 8 64] [--out results.json]
    python benchmarks/kernels/bench_fused_gemm.py --product [--ms 32 64] [--adapters 1 16] \
        [--inside-run-steps 8] [--beside-helpers-per-sm 2] [--slot-rank 64]

``--slot-rank 64`` times the same rank-16 adapters in slots of rank 64 (``--max-lora-rank 64``):
our launch reads only their ranks (the plugin's rank tracker and B's narrow copies); the split
forms work at the slots' rank.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_lora import _graph_time  # type: ignore[import-not-found]  # (timed the same way)

import hi_moe_lora.kernels.gemm_lora as gemm_lora_module
import hi_moe_lora.kernels.gemm_op as gemm_op  # (registers hi_moe_lora::gemm_lora_linear)
import hi_moe_lora.kernels.ops  # noqa: F401  (registers hi_moe_lora::lora_linear)
import hi_moe_lora.kernels.triton_kernel as fused_launcher
from benchmarks.kernels.llama_shapes import PROJECTIONS, packed
from hi_moe_lora.kernels.config import BLOCK_M_LARGE, BLOCK_M_SMALL
from hi_moe_lora.kernels.gemm_lora import fusable, launch_gemm_lora
from hi_moe_lora.kernels.gemm_shrink import launch_gemm_shrink
from hi_moe_lora.kernels.gemm_tiles import MAX_PLAN_ROWS, FewRows, GemmPlan, SeveralRoute
from hi_moe_lora.kernels.ranks import SlotRanks
from hi_moe_lora.kernels.worklist import WorkListBuffers

# Serving compiles a layer's prefill variants on its first call; this benchmark times decode
# sizes only.
fused_launcher.precompile_prefill_variants = lambda *args, **kwargs: 0

#: (input width, output width) of the Llama-3-8B projections (packed ones as one matrix).
SHAPES = {name: packed(name) for name in PROJECTIONS}
RANK = 16
#: Weight bytes the copies of one case must exceed (twice an H200's L2).
POOL_BYTES = 2 * 60 * 2**20
#: Tile shapes tried for the prototype: (BLOCK_N, BLOCK_K, stages, least row tile); the row
#: tile is the call's rows rounded up to a power of two, at least 16 and at least the fourth
#: value.
TILES = ((32, 128, 4, 16), (64, 128, 4, 16), (32, 256, 3, 16), (64, 64, 6, 16))
#: More tried for calls of up to 32 rows: wider K steps (a row tile of 16 or 32 leaves room for
#: them), and row tiles of 64, the height of Hopper's warpgroup MMA, with the unused rows masked
#: (below 64 rows the LoRA inside cost 4.5-20 µs against 1.3-5.4 at 64, H200, 2026-11-28).
SMALL_M_TILES = (
    (16, 256, 4, 16),
    (32, 512, 3, 16),
    (16, 512, 3, 16),
    (64, 256, 3, 16),
    (32, 128, 4, 64),
    (64, 128, 4, 64),
    (32, 256, 3, 64),
)
SMALL_M = 32
#: Output slices of the packed projections (the product's layout).
SLICES = {name: slices for name, (_, slices) in PROJECTIONS.items()}
#: Slots of the product's cases (``--max-loras``).
PRODUCT_SLOTS = 16


def _gemm_lora_kernel(  # type: ignore[no-untyped-def]
    x_ptr,
    w_ptr,
    a_ptr,
    b_ptr,
    y_ptr,
    m,
    n,
    k,
    scale,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    R: tl.constexpr,
    LORA: tl.constexpr,
):
    """``y = x @ W.T (+ scale * (x @ A.T) @ B.T)`` for one tile of ``BLOCK_N`` output columns
    and all ``m`` rows; W is ``(n, k)``, A ``(R, k)``, B ``(n, R)``, all row-major."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    rows = tl.arange(0, R)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    lora = tl.full((BLOCK_M, R), 0.0, tl.float32)
    for k0 in range(0, k, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        xt = tl.load(x_ptr + offs_m[:, None] * k + offs_k[None, :], mask=offs_m[:, None] < m)
        wt = tl.load(w_ptr + offs_n[None, :] * k + offs_k[:, None])
        acc = tl.dot(xt, wt, acc)
        if LORA:
            at = tl.load(a_ptr + rows[None, :] * k + offs_k[:, None])
            lora = tl.dot(xt, at, lora)
    if LORA:
        inter = (lora * scale).to(x_ptr.dtype.element_ty)
        bt = tl.load(b_ptr + offs_n[None, :] * R + rows[:, None])
        acc = tl.dot(inter, bt, acc)
    tl.store(
        y_ptr + offs_m[:, None] * n + offs_n[None, :],
        acc.to(y_ptr.dtype.element_ty),
        mask=offs_m[:, None] < m,
    )


gemm_lora_kernel: Any = triton.jit(_gemm_lora_kernel)


def gemm_lora(
    x: torch.Tensor,
    w: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    y: torch.Tensor,
    scale: float,
    tile: tuple[int, int, int, int],
    lora: bool,
) -> None:
    block_n, block_k, stages, least_rows = tile
    m, k = x.shape
    n = w.shape[0]
    block_m = max(least_rows, triton.next_power_of_2(m))
    gemm_lora_kernel[(n // block_n,)](
        x, w, a, b, y, m, n, k, scale, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        R=RANK, LORA=lora, num_warps=4, num_stages=stages,
    )  # fmt: skip


def run_case(shape: str, m: int, replays: int) -> dict[str, Any]:
    k, n = SHAPES[shape]
    gen = torch.Generator(device="cuda").manual_seed(m * 31 + k)
    copies = max(2, -(-POOL_BYTES // (n * k * 2)))
    dtype = torch.bfloat16

    def rand(*size: int, std: float) -> torch.Tensor:
        return (torch.randn(*size, generator=gen, device="cuda") * std).to(dtype)

    pool = [
        (
            rand(m, k, std=1.0),
            rand(n, k, std=k**-0.5),
            rand(RANK, k, std=k**-0.5),
            rand(n, RANK, std=RANK**-0.5),
            torch.empty(m, n, dtype=dtype, device="cuda"),
        )
        for _ in range(copies)
    ]
    scale = 2.0
    x, w, a, b, y = pool[0]
    exact = x.double() @ w.double().T
    delta = ((x.double() @ a.double().T) * scale).to(dtype).double() @ b.double().T
    errors = {}
    for tile in TILES + SMALL_M_TILES if m <= SMALL_M else TILES:
        try:
            gemm_lora(x, w, a, b, y, scale, tile, lora=True)
        except OutOfResources:  # (more shared memory than an SM has, at this row tile)
            continue
        errors[tile] = float((y.double() - exact - delta).abs().max())
    tiles = list(errors)
    cublas_err = float((torch.mm(x, w.T).double() - exact).abs().max())
    work = WorkListBuffers(max(m, 16), 1, "cuda")
    work.update(torch.zeros(m, dtype=torch.int64).numpy(), [RANK])

    def stacked(t: torch.Tensor) -> torch.Tensor:
        return t[None, None].contiguous()

    ours = [(stacked(a), stacked(b)) for _, _, a, b, _ in pool]
    times: dict[str, Any] = {
        "cublas": _graph_time(
            [lambda c=c: torch.mm(c[0], c[1].T, out=c[4]) for c in pool], replays
        ),
        "cublas+ours": _graph_time(
            [
                call
                for c, (sa, sb) in zip(pool, ours, strict=True)
                for call in (
                    lambda c=c: torch.mm(c[0], c[1].T, out=c[4]),
                    lambda c=c, sa=sa, sb=sb: fused_launcher.launch_fused_lora(
                        c[4], c[0], [sa], [sb], work.tiles, work.counters, scale
                    ),
                )
            ],
            replays,
        )
        * 2,  # (two calls a copy)
    }
    for lora, name in ((False, "triton"), (True, "triton+lora")):
        best = None
        for tile in tiles:
            us = _graph_time(
                [
                    lambda c=c, tile=tile, lora=lora: gemm_lora(
                        c[0], c[1], c[2], c[3], c[4], scale, tile, lora
                    )
                    for c in pool
                ],
                replays,
            )
            if best is None or us < best[0]:
                best = (us, tile)
        assert best is not None
        times[name] = best[0]
        times[f"{name} tile"] = list(best[1])
    return {
        "shape": shape,
        "m": m,
        "us": times,
        "max_err_triton_lora": max(errors.values()),
        "max_err_cublas_base": cublas_err,
        "copies": copies,
    }


@contextlib.contextmanager
def plans_changed(change: Callable[[GemmPlan], GemmPlan]) -> Iterator[None]:
    """Inside the block, the op's plans (as ``gemm_op.fusable`` gives them) pass through
    ``change``; a call that is not fused stays so."""
    real = gemm_op.fusable

    def forced(x: torch.Tensor, w: torch.Tensor, b: Any, rows: int) -> GemmPlan | None:
        plan = real(x, w, b, rows)
        return None if plan is None else change(plan)

    gemm_op.fusable = forced
    try:
        yield
    finally:
        gemm_op.fusable = real


def run_product_case(
    shape: str, m: int, adapters: int, replays: int, slot_rank: int = RANK
) -> dict[str, Any]:
    """The fused-GEMM op against cuBLAS then our op, ``adapters`` adapters over ``m`` rows.

    ``slot_rank`` above ``RANK``: vLLM's slots under a larger ``--max-lora-rank``, the adapters
    still of rank ``RANK`` (zeros beyond, as vLLM pads them), with the plugin's rank tracker
    (:class:`.ranks.SlotRanks`: the real ranks and B's narrow copies, which our launch reads)."""
    k, n = SHAPES[shape]
    widths = SLICES[shape]
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + adapters)
    dtype = torch.bfloat16
    copies = max(2, -(-POOL_BYTES // (n * k * 2)))

    def rand(*size: int, std: float) -> torch.Tensor:
        return (torch.randn(*size, generator=gen, device="cuda") * std).to(dtype)

    def pad(t: torch.Tensor, rows: bool = False) -> torch.Tensor:
        """``t`` widened to the slots' rank (A's rank rows, B's rank columns), zeros beyond."""
        extra = slot_rank - RANK
        return torch.nn.functional.pad(t, (0, 0, 0, extra) if rows else (0, extra)).contiguous()

    pool = [
        {
            "x": rand(m, k, std=1.0),
            "w": rand(n, k, std=k**-0.5),
            "a": [pad(rand(PRODUCT_SLOTS, 1, RANK, k, std=k**-0.5), rows=True) for _ in widths],
            "b": [pad(rand(PRODUCT_SLOTS, 1, wd, RANK, std=RANK**-0.5)) for wd in widths],
            "y": torch.empty(m, n, dtype=dtype, device="cuda"),
        }
        for _ in range(copies)
    ]
    slots = torch.arange(m, dtype=torch.int32) % adapters
    work = WorkListBuffers(max(m, 16), PRODUCT_SLOTS, "cuda", fused_slot=True)
    work.update(slots.numpy(), [RANK] * PRODUCT_SLOTS)
    assert work.fused_slot is not None
    token_slot = slots.to("cuda")
    ranks = torch.full((PRODUCT_SLOTS,), RANK, dtype=torch.int32, device="cuda")
    if slot_rank > RANK:  # (the wrapper's tracker: real ranks, B's narrow copies)
        tracker = SlotRanks(PRODUCT_SLOTS, slot_rank, "cuda")
        for c in pool:
            tracker.observe(c["a"], c["b"])
        tracker.refresh(list(range(PRODUCT_SLOTS)))
        ranks = tracker.ranks
    no_lora = torch.zeros(1, dtype=torch.bool)
    small, large = work.tiles[BLOCK_M_SMALL], work.tiles[BLOCK_M_LARGE]
    rest_small, rest_large = work.rest_tiles[BLOCK_M_SMALL], work.rest_tiles[BLOCK_M_LARGE]

    def unfused(c: dict[str, Any]) -> None:
        torch.mm(c["x"], c["w"].T, out=c["y"])
        torch.ops.hi_moe_lora.lora_linear(
            c["y"], c["x"], c["a"], c["b"], small, large, ranks, work.counters, no_lora,
            1.0, 0, True, None, None,
        )  # fmt: skip

    active = torch.tensor([adapters], dtype=torch.int32)  # (vLLM's count, as it would capture)

    def fused(c: dict[str, Any], specialized: bool = False, min_rows: int = 1) -> None:
        torch.ops.hi_moe_lora.gemm_lora_linear(
            c["y"], c["x"], c["w"], c["a"], c["b"], small, large, rest_small, rest_large,
            token_slot, work.fused_slot, ranks, work.counters, work.gemm_arrivals, no_lora,
            1.0, min_rows, MAX_PLAN_ROWS, active, specialized, None, None,
        )  # fmt: skip

    plan = fusable(pool[0]["x"], pool[0]["w"], pool[0]["b"], 64)
    assert plan is not None, f"{shape} at {m} rows: not fusable"

    def fused_then_ours(c: dict[str, Any]) -> None:  # (the form before the split form)
        launch_gemm_lora(
            c["y"], c["x"], c["w"], c["a"], c["b"], token_slot, work.fused_slot, 1.0, None,
            plan.lora_tile, work.gemm_arrivals,
        )  # fmt: skip
        torch.ops.hi_moe_lora.lora_linear(
            c["y"], c["x"], c["a"], c["b"], rest_small, rest_large, ranks, work.counters,
            no_lora, 1.0, 0, True, None, None,
        )  # fmt: skip

    def routed(c: dict[str, Any], route: SeveralRoute) -> None:
        """The op under the flag, the plan's route for several adapters replaced by ``route``."""
        with plans_changed(lambda plan: replace(plan, several=route)):
            fused(c, specialized=True)

    def few_rows(c: dict[str, Any], route: SeveralRoute) -> None:
        """The op under the flag as a call below the fused GEMM's least rows, with a plan whose
        ``few_rows`` gives every step with LoRA ``route``: one adapter over the whole work list
        (no fused slot), several as served."""
        few = FewRows(1, route, one_adapter=True)
        with plans_changed(lambda plan: replace(plan, several=route, few_rows=few)):
            fused(c, specialized=True, min_rows=MAX_PLAN_ROWS + 1)

    c = pool[0]
    unfused(c)
    expected = c["y"].double()
    deviation = 0.0
    split_forms = (SeveralRoute.SPLIT, SeveralRoute.ONE_LAUNCH, SeveralRoute.SHRINK_BESIDE)
    for form in (
        fused,
        lambda c: fused(c, specialized=True),
        fused_then_ours,
        *(lambda c, r=route: routed(c, r) for route in split_forms),
        *(lambda c, r=route: few_rows(c, r) for route in split_forms),
    ):
        form(c)
        deviation = max(deviation, float((c["y"].double() - expected).abs().max()))
    times = {
        "cublas": _graph_time(
            [lambda c=c: torch.mm(c["x"], c["w"].T, out=c["y"]) for c in pool], replays
        ),
        "cublas+ours": _graph_time([lambda c=c: unfused(c) for c in pool], replays),
        "fused": _graph_time([lambda c=c: fused(c) for c in pool], replays),
        "fused, specialized": _graph_time(
            [lambda c=c: fused(c, specialized=True) for c in pool], replays
        ),
        "fused then ours": _graph_time([lambda c=c: fused_then_ours(c) for c in pool], replays),
        "shrink alone": _graph_time(
            [
                lambda c=c: launch_gemm_shrink(
                    c["x"], c["a"], rest_small, BLOCK_M_SMALL, PRODUCT_SLOTS, work.gemm_arrivals
                )
                for c in pool
            ],
            replays,
        ),
    }
    for route in split_forms:
        times[f"{route.value}, specialized"] = _graph_time(
            [lambda c=c, r=route: routed(c, r) for c in pool], replays
        )
        times[f"{route.value}, few rows"] = _graph_time(
            [lambda c=c, r=route: few_rows(c, r) for c in pool], replays
        )
    return {
        "shape": shape,
        "m": m,
        "adapters": adapters,
        "slot_rank": slot_rank,
        "us": times,
        "max_diff_fused_vs_unfused": deviation,
        "copies": copies,
    }


def product_main(args: argparse.Namespace) -> int:
    rows = []
    print(
        "| shape | M | adapters | cuBLAS | cuBLAS + ours | fused GEMM then ours (before) "
        "| fused op | fused op, specialized | shrink alone | LoRA adds, ours "
        "| LoRA adds, before | LoRA adds, fused | LoRA adds, specialized "
        "| LoRA adds, split form | LoRA adds, one launch | LoRA adds, shrink beside "
        "| few rows: split form | few rows: one launch | few rows: shrink beside | max diff |"
    )
    print("|---" * 20 + "|")
    for shape in args.shapes:
        for m in args.ms:
            for adapters in args.adapters:
                row = run_product_case(shape, m, adapters, args.replays, args.slot_rank)
                rows.append(row)
                if args.out is not None:
                    args.out.write_text(json.dumps(rows, indent=1))
                t = row["us"]
                base = t["cublas"]
                print(
                    f"| {shape} | {m} | {adapters} | {base:.1f} | {t['cublas+ours']:.1f} "
                    f"| {t['fused then ours']:.1f} | {t['fused']:.1f} "
                    f"| {t['fused, specialized']:.1f} | {t['shrink alone']:.1f} "
                    f"| {t['cublas+ours'] - base:.1f} | {t['fused then ours'] - base:.1f} "
                    f"| {t['fused'] - base:.1f} | {t['fused, specialized'] - base:.1f} "
                    f"| {t['split, specialized'] - base:.1f} "
                    f"| {t['one-launch, specialized'] - base:.1f} "
                    f"| {t['shrink-beside, specialized'] - base:.1f} "
                    f"| {t['split, few rows'] - base:.1f} "
                    f"| {t['one-launch, few rows'] - base:.1f} "
                    f"| {t['shrink-beside, few rows'] - base:.1f} "
                    f"| {row['max_diff_fused_vs_unfused']:.3f} |",
                    flush=True,
                )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--replays", type=int, default=30)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--product", action="store_true", help="time the served op")
    parser.add_argument("--adapters", type=int, nargs="+", default=[1, 16])
    parser.add_argument(
        "--slot-rank",
        type=int,
        default=RANK,
        choices=(16, 32, 64, 128),
        help="the slots' rank (--max-lora-rank; --product only); the adapters stay rank 16",
    )
    parser.add_argument(
        "--inside-run-steps",
        type=int,
        default=gemm_op.INSIDE_RUN_STEPS,
        help="K steps a shrink job holds inside the GEMM's launch (the one-launch column)",
    )
    parser.add_argument(
        "--beside-helpers-per-sm",
        type=int,
        default=gemm_lora_module.BESIDE_HELPERS_PER_SM,
        help="helper programs an SM in the shrink-beside column's launch beside the GEMM",
    )
    args = parser.parse_args(argv)
    gemm_op.INSIDE_RUN_STEPS = args.inside_run_steps
    gemm_lora_module.BESIDE_HELPERS_PER_SM = args.beside_helpers_per_sm
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    if args.product:
        return product_main(args)
    rows = []
    print(
        "| shape | M | cuBLAS | cuBLAS + ours | Triton GEMM | Triton GEMM + LoRA "
        "| LoRA adds, ours | LoRA adds, fused |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for shape in args.shapes:
        for m in args.ms:
            row = run_case(shape, m, args.replays)
            rows.append(row)
            if args.out is not None:  # (after every case: a cut-off run keeps what it timed)
                args.out.write_text(json.dumps(rows, indent=1))
            t = row["us"]
            print(
                f"| {shape} | {m} | {t['cublas']:.1f} | {t['cublas+ours']:.1f} | "
                f"{t['triton']:.1f} | {t['triton+lora']:.1f} | "
                f"{t['cublas+ours'] - t['cublas']:.1f} | {t['triton+lora'] - t['triton']:.1f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
