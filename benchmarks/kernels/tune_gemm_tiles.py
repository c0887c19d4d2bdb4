"""Measure the fused GEMM's tiles on this GPU and write its plans (``gemm_tiles.json``).

A 64-row GEMM is bound by streaming its weight, and cuBLAS streams the Llama-3-8B projections'
weights at 2.4-3.6 TB/s on an H200 (qkv 18.5 µs, o 13.9, gate_up 64.8, down 39.3; the card
copies at about 4.3). Whether a Triton tile does better, and which, depends on the GPU and the
shape, so this script tries a grid of tiles (columns per program, K step, pipeline depth, warps,
K splits) per projection and keeps, for :mod:`hi_moe_lora.kernels.gemm_tiles`:

- ``lora``: the fastest tile with one adapter's LoRA inside (every row on it, 16 slots of rank
  16, the projection's real slices), and ``fuse``: whether it beat cuBLAS then our launch
  (``hi_moe_lora::lora_linear``), which is what a one-adapter step runs without it;
- ``plain``: the fastest tile without LoRA inside, kept only when it beat cuBLAS by more than
  ``--margin`` (else ``null``: cuBLAS);
- ``several``: the fastest route for a step of 16 adapters (the rows dealt round robin): the
  plan's plain GEMM then our launch (``ours``), the GEMM on the ``lora`` tile then our launch
  (``fused``), the split form (``split``: a shrink launch, then the GEMM on the ``lora``
  tile with the expand in its epilogue), or the split form in one launch (``one-launch``: the
  shrink's jobs inside the GEMM's launch), or with its helpers in a launch of their own on a
  side stream (``shrink-beside``: timed and printed, but taken only where ``--routes`` names
  it; served, its fork and join stalled a step that the microbenchmark saw as 0.3 µs faster).

The routes that run the GEMM on the ``lora`` tile are timed on every LoRA tile within
``--route-margin`` µs of the fastest with one adapter (at most ``--route-tiles``), and the plan
takes the tile and route fastest with 16 adapters among them. Tiles that tie with one adapter
differ by up to 26 µs in one launch (H200, 2026-11-29: a tile's shared memory decides whether
the shrink's helpers find room), so timing the routes on the fastest tile alone chose gate_up's
slowest route and missed down's fastest (benchmarks/README.md, eighteenth window).

Every call is timed in one CUDA graph over a pool of weight copies larger than L2 (each call
reads W from HBM, as a served step does), median of the replays, at ``--m`` rows; each tile's
output is checked against a float64 reference before it is timed. Tiles are compiled first in
``--workers`` processes (Triton's cache is shared), then timed in this one. Plain tiles are
tried on the whole grid, LoRA tiles on the ``--candidates`` (12) fastest plain ones and the
rule of thumb's.

    python benchmarks/kernels/tune_gemm_tiles.py [--m 64] [--out tiles.json] \\
        [--results results.json] [--shapes qkv o gate_up down] [--shape NAME=K:W1,W2 ...] \\
        [--route-margin 1.0] [--route-tiles 4] [--routes ours fused split one-launch]

``--shape`` adds a projection of another model or tensor-parallel split: its input width K and
its output slices (qkv at tensor parallel 2: ``qkv_tp2=4096:2048,512,512``). On a GPU the table
holds, a shape it does not hold is not fused.

Below 33 rows (``--m 8``: the 8-concurrent decode step) it times and prints the same columns
for ``--results``, but writes no table: a table's plans serve 33-64 rows, and few-rows calls
take a plan's ``few_rows`` (:class:`hi_moe_lora.kernels.gemm_tiles.FewRows`) on the plan's
LoRA tile.

``--out`` writes the table (merged into the file if it exists, each re-tuned shape keeping
its ``few_rows``, which ``tune_few_rows.py`` measures; serve it with
``HI_MOE_LORA_GEMM_TILES=tiles.json``, or copy the device's entry into
``hi_moe_lora/kernels/gemm_tiles.json`` to ship it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from triton.runtime.errors import OutOfResources

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_lora import _graph_time  # type: ignore[import-not-found]  # (timed the same way)

import hi_moe_lora.kernels.ops  # noqa: F401  (registers hi_moe_lora::lora_linear)
import hi_moe_lora.kernels.triton_kernel as fused_launcher
from benchmarks.kernels.llama_shapes import PROJECTIONS
from hi_moe_lora.kernels.config import BLOCK_M_LARGE, BLOCK_M_SMALL
from hi_moe_lora.kernels.gemm_lora import (
    FUSED_GEMM_ROWS,
    GemmExpand,
    counter_regions,
    launch_gemm_lora,
    launch_plain_gemm,
)
from hi_moe_lora.kernels.gemm_op import INSIDE_RUN_STEPS
from hi_moe_lora.kernels.gemm_shrink import launch_gemm_shrink, prepare_shrink
from hi_moe_lora.kernels.gemm_tiles import (
    MAX_PLAN_ROWS,
    MEASURED_SLOT_RANK,
    GemmPlan,
    GemmTile,
    SeveralRoute,
    default_tile,
    load_slot_rank,
    load_table,
    shape_key,
    table_json,
)
from hi_moe_lora.kernels.worklist import WorkListBuffers, arrival_counters

# (decode sizes only: serving compiles a layer's prefill variants on its first call)
fused_launcher.precompile_prefill_variants = lambda *args, **kwargs: 0

#: (input width K, output slices) of the projections: Llama-3-8B's, and ``--shape``'s added.
SHAPES = dict(PROJECTIONS)
RANK = 16
SLOTS = 16
SLOT = 3  # (the adapter every row is on)
#: Weight bytes the copies of one case must exceed (twice an H200's L2).
POOL_BYTES = 2 * 60 * 2**20
#: Shared memory a tile may ask for (an H200's SM holds 227 KiB).
SMEM_BYTES = 200 * 1024
GRID = {
    "block_n": (32, 64, 128),
    "block_k": (64, 128, 256),
    "stages": (3, 4, 6),
    "warps": (4, 8),
    "split_k": (1, 2, 4, 8),
}


def parse_shape(text: str) -> tuple[str, tuple[int, tuple[int, ...]]]:
    """``NAME=K:W1,W2,...`` as a (name, (K, slices)) entry of :data:`SHAPES`."""
    try:
        name, spec = text.split("=", 1)
        k, widths = spec.split(":", 1)
        entry = (int(k), tuple(int(w) for w in widths.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=K:W1[,W2...]") from None
    if not name or entry[0] < 1 or not all(w >= 1 for w in entry[1]):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a name and positive widths")
    return name, entry


def candidate_tiles(n: int, k: int, widths: tuple[int, ...], m: int) -> list[GemmTile]:
    """The grid, less the tiles that do not fit the shape, that ask for more shared memory
    than an SM has, that leave fewer programs than about one an SM or more than 16, or that
    split K into runs of fewer than two steps."""
    rows = max(16, 1 << (m - 1).bit_length())
    tiles = []
    for bn, bk, stages, warps, split in itertools.product(*GRID.values()):
        if any(wd % bn for wd in widths) or k % (bk * split) or k // (bk * split) < 2:
            continue
        if warps == 8 and bn < 64:
            continue
        smem = stages * 2 * (rows * bk + bk * bn + bk * RANK)
        programs = n // bn * split
        if smem > SMEM_BYTES or not 96 <= programs <= 16 * 132:
            continue
        tiles.append(GemmTile(bn, bk, stages, warps, split))
    return tiles


def _case(
    k: int, widths: tuple[int, ...], m: int, copies: int, seed: int = 0
) -> list[dict[str, Any]]:
    """``copies`` sets of x, W, the slices' A and B (16 slots) and y, on the GPU."""
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*size: int, std: float) -> torch.Tensor:
        return (torch.randn(*size, generator=gen, device="cuda") * std).to(torch.bfloat16)

    return [
        {
            "x": rand(m, k, std=1.0),
            "w": rand(sum(widths), k, std=k**-0.5),
            "a": [rand(SLOTS, 1, RANK, k, std=k**-0.5) for _ in widths],
            "b": [rand(SLOTS, 1, wd, RANK, std=RANK**-0.5) for wd in widths],
            "y": torch.empty(m, sum(widths), dtype=torch.bfloat16, device="cuda"),
        }
        for _ in range(copies)
    ]


#: vLLM's step flag the benchmarks pass: the step has LoRA.
_WITH_LORA = torch.zeros(1, dtype=torch.bool)


def cublas_then_ours(c: dict[str, Any], work: WorkListBuffers, ranks: torch.Tensor) -> None:
    """``y = x W^T`` by cuBLAS, then our launch over ``work``'s whole list (what serving runs
    without the fused GEMM)."""
    torch.mm(c["x"], c["w"].T, out=c["y"])
    torch.ops.hi_moe_lora.lora_linear(
        c["y"], c["x"], c["a"], c["b"], work.tiles[BLOCK_M_SMALL], work.tiles[BLOCK_M_LARGE],
        ranks, work.counters, _WITH_LORA, 1.0, 0, True, None, None,
    )  # fmt: skip


def lora_reference(case: dict[str, Any], slots: list[int]) -> torch.Tensor:
    """``x W^T`` in float64 plus each row's LoRA from its slot in ``slots``, the intermediate
    ``x A^T`` rounded to bf16 as the kernels keep it, per output slice."""
    reference = case["x"].double() @ case["w"].double().T
    col = 0
    for a, b in zip(case["a"], case["b"], strict=True):
        for row, slot in enumerate(slots):
            inter = (case["x"][row].double() @ a[slot, 0].double().T).to(torch.bfloat16)
            reference[row, col : col + b.shape[2]] += inter.double() @ b[slot, 0].double().T
        col += b.shape[2]
    return reference


def _compile(job: tuple[int, tuple[int, ...], int, list[tuple[int, ...]], bool]) -> int:
    """In a worker: launch each tile once (Triton compiles it into the shared cache)."""
    k, widths, m, tiles, lora = job
    case = _case(k, widths, m, 1)[0]
    token_slot = torch.full((m,), SLOT, dtype=torch.int32, device="cuda")
    fused_slot = torch.tensor([SLOT], dtype=torch.int32, device="cuda")
    arrivals = arrival_counters("cuda")
    done = 0
    for fields in tiles:
        tile = GemmTile(*fields)
        try:
            if lora:
                launch_gemm_lora(
                    case["y"], case["x"], case["w"], case["a"], case["b"], token_slot,
                    fused_slot, 1.0, tile=tile, arrivals=arrivals,
                )  # fmt: skip
            else:
                launch_plain_gemm(case["y"], case["x"], case["w"], tile, arrivals)
            done += 1
        except OutOfResources:  # (the timing pass skips it too)
            continue
    torch.cuda.synchronize()
    return done


class Compiler:
    """Compiles tiles ahead of the timing, in ``workers`` processes (none: as they are timed)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool = None
        if workers > 0:
            spawn = multiprocessing.get_context("spawn")
            self.pool = ProcessPoolExecutor(workers, mp_context=spawn)

    def compile(self, shape: str, m: int, tiles: list[GemmTile], lora: bool) -> None:
        if self.pool is None:
            return
        k, widths = SHAPES[shape]  # (the workers hold only the built-in shapes)
        fields = [tuple(_fields(t)) for t in tiles]
        chunks = [fields[i :: self.workers] for i in range(self.workers)]
        jobs = [(k, widths, m, chunk, lora) for chunk in chunks if chunk]
        list(self.pool.map(_compile, jobs))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def tune_shape(
    shape: str,
    m: int,
    replays: int,
    candidates: int,
    compiler: Compiler,
    route_margin: float = 1.0,
    route_tiles: int = 4,
) -> dict[str, Any]:
    k, widths = SHAPES[shape]
    n = sum(widths)
    copies = max(2, -(-POOL_BYTES // (n * k * 2)))
    cases = _case(k, widths, m, copies, seed=m + k)
    token_slot = torch.full((m,), SLOT, dtype=torch.int32, device="cuda")
    fused_slot = torch.tensor([SLOT], dtype=torch.int32, device="cuda")
    arrivals = arrival_counters("cuda")
    work = WorkListBuffers(max(m, 16), SLOTS, "cuda")
    work.update([SLOT] * m, [RANK] * SLOTS)
    ranks = torch.full((SLOTS,), RANK, dtype=torch.int32, device="cuda")

    first = cases[0]
    base_ref = first["x"].double() @ first["w"].double().T
    lora_ref = lora_reference(first, [SLOT] * m)

    def cublas(c: dict[str, Any]) -> None:
        torch.mm(c["x"], c["w"].T, out=c["y"])

    def cublas_ours(c: dict[str, Any]) -> None:
        cublas_then_ours(c, work, ranks)

    def plain(c: dict[str, Any], tile: GemmTile) -> None:
        launch_plain_gemm(c["y"], c["x"], c["w"], tile, arrivals)

    def fused(c: dict[str, Any], tile: GemmTile) -> None:
        launch_gemm_lora(
            c["y"], c["x"], c["w"], c["a"], c["b"], token_slot, fused_slot, 1.0,
            tile=tile, arrivals=arrivals,
        )  # fmt: skip

    def timed(fn: Any, tile: GemmTile | None, reference: torch.Tensor) -> tuple[float, float]:
        """(µs a call, largest difference from the reference), or (inf, inf) where the tile
        does not compile on this GPU."""
        run = (lambda c: fn(c)) if tile is None else (lambda c: fn(c, tile))
        try:
            first["y"].fill_(float("nan"))
            run(first)
            torch.cuda.synchronize()
        except OutOfResources:  # (more shared memory than this GPU's SM holds)
            return float("inf"), float("inf")
        error = float((first["y"].double() - reference).abs().max())
        return _graph_time([lambda c=c: run(c) for c in cases], replays), error

    began = time.monotonic()
    t_cublas, e_cublas = timed(cublas, None, base_ref)
    t_ours, e_ours = timed(cublas_ours, None, lora_ref)
    grid = candidate_tiles(n, k, widths, m)
    compiler.compile(shape, m, grid, lora=False)
    plain_times = {tile: timed(plain, tile, base_ref) for tile in grid}
    ranked = sorted(plain_times, key=lambda t: plain_times[t][0])
    lora_grid = list(dict.fromkeys([*ranked[:candidates], default_tile(n, k)]))
    compiler.compile(shape, m, lora_grid, lora=True)
    lora_times = {tile: timed(fused, tile, lora_ref) for tile in lora_grid}
    best_plain = min(plain_times, key=lambda t: plain_times[t][0])
    route_grid = close_tiles(lora_times, route_margin, route_tiles)
    best_lora = route_grid[0]
    by_tile = _time_several(cases, route_grid, timed)
    several_after, several_fused, several_split, several_one, several_beside = by_tile[best_lora]
    return {
        "shape": shape,
        "n": n,
        "k": k,
        "m": m,
        "copies": copies,
        "seconds": round(time.monotonic() - began, 1),
        "cublas_us": t_cublas,
        "cublas_ours_us": t_ours,
        "max_err_cublas": e_cublas,
        "max_err_cublas_ours": e_ours,
        "plain": [[*_fields(t), us, err] for t, (us, err) in plain_times.items()],
        "lora": [[*_fields(t), us, err] for t, (us, err) in lora_times.items()],
        "best_plain": [*_fields(best_plain), *plain_times[best_plain]],
        "best_lora": [*_fields(best_lora), *lora_times[best_lora]],
        "default_lora_us": lora_times[default_tile(n, k)][0],
        "several_cublas_ours_us": several_after[0],
        "several_fused_ours_us": several_fused[0],
        "several_split_us": several_split[0],
        "several_one_launch_us": several_one[0],
        "several_shrink_beside_us": several_beside[0],
        "max_err_several_fused_ours": several_fused[1],
        "max_err_several_split": several_split[1],
        "max_err_several_one_launch": several_one[1],
        "max_err_several_shrink_beside": several_beside[1],
        "several_by_tile": [
            {
                "tile": _fields(tile),
                "lora_us": lora_times[tile][0],
                "us": {route.value: us for route, (us, _) in zip(ROUTES, times, strict=True)},
                "max_err": max(err for _, err in times),
            }
            for tile, times in by_tile.items()
        ],
    }


#: The routes :func:`_time_several` times, in the order it returns them.
ROUTES = (
    SeveralRoute.OURS,
    SeveralRoute.FUSED,
    SeveralRoute.SPLIT,
    SeveralRoute.ONE_LAUNCH,
    SeveralRoute.SHRINK_BESIDE,
)
#: The routes a plan may take (``--routes``): every route timed but the shrink beside. Its side
#: stream's fork and join cost a served step more than the microbenchmark sees: qkv's plan took
#: it for 0.3 µs a call, and a 16-adapter decode step then idled 2,555 µs and kept the GPU busy
#: 376 µs longer (gate_up's tiles moved in the same table; H200, 2026-11-29, benchmarks/README.md,
#: nineteenth window).
PLANNED_ROUTES = tuple(route for route in ROUTES if route is not SeveralRoute.SHRINK_BESIDE)


def close_tiles(
    lora_times: dict[GemmTile, tuple[float, float]], margin: float, most: int
) -> list[GemmTile]:
    """The LoRA tiles within ``margin`` µs of the fastest with one adapter, fastest first, at
    most ``most`` (the fastest always)."""
    ranked = sorted(lora_times, key=lambda tile: lora_times[tile][0])
    fastest = lora_times[ranked[0]][0]
    close = [tile for tile in ranked[1:] if lora_times[tile][0] <= fastest + margin]
    return [ranked[0], *close][: max(1, most)]


def _time_several(
    cases: list[dict[str, Any]], lora_tiles: list[GemmTile], timed: Any
) -> dict[GemmTile, tuple[tuple[float, float], ...]]:
    """A step of ``SLOTS`` adapters (the rows dealt round robin), per tile of ``lora_tiles``,
    each route of :data:`ROUTES` in order: cuBLAS then our launch (the same for every tile,
    timed once), the GEMM on the tile (no fused slot in such a step) then our launch on the
    rest, the split form (the shrink launch, then the GEMM on the tile with the expand in its
    epilogue), the split form in one launch (the op's runs of K for the shrink inside), and
    the same with the helpers' launch beside the GEMM's; each (µs a call, largest difference
    from float64)."""
    first = cases[0]
    m = first["x"].shape[0]
    slots = [row % SLOTS for row in range(m)]
    work = WorkListBuffers(max(m, 16), SLOTS, "cuda", fused_slot=True)
    work.update(slots, [RANK] * SLOTS)
    assert work.fused_slot is not None
    assert work.gemm_arrivals is not None
    fused_slot, arrivals = work.fused_slot, work.gemm_arrivals
    token_slot = torch.tensor(slots, dtype=torch.int32, device="cuda")
    ranks = torch.full((SLOTS,), RANK, dtype=torch.int32, device="cuda")
    reference = lora_reference(first, slots)

    def after(c: dict[str, Any]) -> None:
        cublas_then_ours(c, work, ranks)

    rest_small, rest_large = work.rest_tiles[BLOCK_M_SMALL], work.rest_tiles[BLOCK_M_LARGE]

    def fused_then_ours(c: dict[str, Any], tile: GemmTile) -> None:
        launch_gemm_lora(
            c["y"], c["x"], c["w"], c["a"], c["b"], token_slot, fused_slot, 1.0,
            tile=tile, arrivals=arrivals,
        )  # fmt: skip
        torch.ops.hi_moe_lora.lora_linear(
            c["y"], c["x"], c["a"], c["b"], rest_small, rest_large,
            ranks, work.counters, _WITH_LORA, 1.0, 0, True, None, None,
        )  # fmt: skip

    def split(c: dict[str, Any], tile: GemmTile) -> None:
        shrunk = launch_gemm_shrink(c["x"], c["a"], rest_small, BLOCK_M_SMALL, SLOTS, arrivals)
        launch_gemm_lora(
            c["y"], c["x"], c["w"], c["a"], c["b"], token_slot, fused_slot, 1.0,
            tile=tile, arrivals=arrivals,
            expand=GemmExpand(rest_large, BLOCK_M_LARGE, shrunk, SLOTS),
        )  # fmt: skip

    gemm_arrivals, shrink_arrivals, sync = counter_regions(arrivals)

    def one_launch(c: dict[str, Any], tile: GemmTile, beside: bool = False) -> None:
        inside = prepare_shrink(
            c["x"], c["a"], rest_small, BLOCK_M_SMALL, SLOTS, shrink_arrivals, INSIDE_RUN_STEPS
        )
        launch_gemm_lora(
            c["y"], c["x"], c["w"], c["a"], c["b"], token_slot, fused_slot, 1.0,
            tile=tile, arrivals=gemm_arrivals,
            expand=GemmExpand(rest_large, BLOCK_M_LARGE, inside.out, SLOTS, inside, sync, beside),
        )  # fmt: skip

    def shrink_beside(c: dict[str, Any], tile: GemmTile) -> None:
        one_launch(c, tile, beside=True)

    ours = timed(after, None, reference)
    on_tile = (fused_then_ours, split, one_launch, shrink_beside)
    return {
        tile: (ours, *(timed(route, tile, reference) for route in on_tile)) for tile in lora_tiles
    }


def _fields(tile: GemmTile) -> list[int]:
    return [tile.block_n, tile.block_k, tile.stages, tile.warps, tile.split_k]


def plan_from(
    row: dict[str, Any], margin: float, routes: tuple[SeveralRoute, ...] = PLANNED_ROUTES
) -> GemmPlan:
    """The shape's plan from its measurements: the plain tile where it beat cuBLAS by
    ``margin``; among the LoRA tiles whose routes were timed (``several_by_tile``; rows from
    before it: the fastest tile's, in the flat ``several_*`` fields), the tile and route of
    ``routes`` fastest with several adapters. Ties go to the tile faster with one adapter, then
    to :data:`ROUTES`' order ("ours" first); a route a row does not hold was not measured and is
    never taken."""
    plain_us = row["best_plain"][5]
    plain_tile = GemmTile(*row["best_plain"][:5])
    keep_plain = plain_us < row["cublas_us"] * (1.0 - margin)
    # Several adapters on the route "ours": the plain GEMM the plan keeps, then our launch.
    gemm_us = plain_us if keep_plain else row["cublas_us"]
    best: tuple[float, GemmTile, float, SeveralRoute] | None = None
    for tile, lora_us, us in _route_timings(row):
        for route in ROUTES:
            if route not in routes:
                continue
            taken = us.get(route.value, float("inf"))
            if route is SeveralRoute.OURS:
                taken = taken - row["cublas_us"] + gemm_us
            if best is None or taken < best[0]:
                best = (taken, tile, lora_us, route)
    assert best is not None
    _, lora_tile, lora_us, several = best
    return GemmPlan(
        lora_tile,
        fuse=lora_us < row["cublas_ours_us"],
        plain_tile=plain_tile if keep_plain else None,
        several=several,
    )


def merge_plans(
    table: dict[str, dict[str, GemmPlan]], device: str, plans: dict[str, GemmPlan]
) -> None:
    """``plans`` into ``table``'s ``device`` entry. A re-tuned shape keeps the ``few_rows`` its
    plan had (this sweep times 33-64 rows; ``few_rows`` serves fewer, and is measured apart:
    the 8-row sweeps here and ``tune_few_rows.py``)."""
    entry = table.setdefault(device, {})
    for key, plan in plans.items():
        old = entry.get(key)
        keep = None if old is None else old.few_rows
        entry[key] = plan if keep is None else replace(plan, few_rows=keep)


def _route_timings(row: dict[str, Any]) -> list[tuple[GemmTile, float, dict[str, float]]]:
    """(LoRA tile, its µs with one adapter, {route: µs with several}) per tile timed, the
    fastest with one adapter first."""
    if row.get("several_by_tile"):
        entries = sorted(row["several_by_tile"], key=lambda entry: entry["lora_us"])
        return [(GemmTile(*e["tile"]), e["lora_us"], e["us"]) for e in entries]
    flat = {
        SeveralRoute.OURS: row.get("several_cublas_ours_us", row["cublas_us"]),
        SeveralRoute.FUSED: row.get("several_fused_ours_us"),
        SeveralRoute.SPLIT: row.get("several_split_us"),
        SeveralRoute.ONE_LAUNCH: row.get("several_one_launch_us"),
        SeveralRoute.SHRINK_BESIDE: row.get("several_shrink_beside_us"),
    }
    us = {route.value: t for route, t in flat.items() if t is not None}
    return [(GemmTile(*row["best_lora"][:5]), row["best_lora"][5], us)]


def _label(fields: list[Any]) -> str:
    """A tile's fields (:func:`_fields`) as the printed table names it."""
    block_n, block_k, stages, warps, split_k = fields[:5]
    return f"{block_n}x{block_k}x{stages} w{warps} s{split_k}"


def _other_tile(plan: GemmPlan, best_lora: list[Any]) -> str:
    """Where the plan's LoRA tile is not the fastest with one adapter: which it is."""
    fields = _fields(plan.lora_tile)
    return "" if fields == best_lora[:5] else f" on {_label(fields)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--m",
        type=int,
        default=64,
        help=f"token rows, 1-{MAX_PLAN_ROWS} (a table's plans serve {FUSED_GEMM_ROWS[0]}-"
        f"{FUSED_GEMM_ROWS[1]}: --out takes only those)",
    )
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--shape", type=parse_shape, action="append", default=[], dest="extra")
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--candidates", type=int, default=12, dest="lora_candidates")
    parser.add_argument("--margin", type=float, default=0.02, help="plain tile must beat cuBLAS by")
    parser.add_argument("--workers", type=int, default=12, help="compiling processes (0: none)")
    parser.add_argument("--out", type=Path, help="the table to write (merged)")
    parser.add_argument("--results", type=Path, help="every tile's time, as JSON")
    parser.add_argument(
        "--route-margin",
        type=float,
        default=1.0,
        help="time the routes on the LoRA tiles within this many µs of the fastest",
    )
    parser.add_argument("--route-tiles", type=int, default=4, help="at most this many tiles")
    parser.add_argument(
        "--routes",
        nargs="+",
        type=SeveralRoute,
        default=list(PLANNED_ROUTES),
        metavar="ROUTE",
        help="the routes a plan may take for several adapters (all are timed; default: "
        + " ".join(route.value for route in PLANNED_ROUTES)
        + "; the shrink beside stalls a served step)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.m <= MAX_PLAN_ROWS:
        parser.error(f"--m is from 1 to {MAX_PLAN_ROWS} rows, not {args.m}")
    if args.out is not None and not FUSED_GEMM_ROWS[0] <= args.m <= FUSED_GEMM_ROWS[1]:
        parser.error(
            f"--out writes plans that serve {FUSED_GEMM_ROWS[0]}-{FUSED_GEMM_ROWS[1]} rows; "
            f"tiles timed at {args.m} rows would serve them untimed (--results keeps the times)"
        )
    if SeveralRoute.OURS not in args.routes:
        parser.error('--routes must hold "ours" (a call the split form does not fit takes it)')
    SHAPES.update(dict(args.extra))
    shapes = [*args.shapes, *(name for name, _ in args.extra)]
    if not shapes:
        parser.error("no shape to measure")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    device = torch.cuda.get_device_name()
    compiler = Compiler(args.workers)
    rows: list[dict[str, Any]] = []
    plans: dict[str, GemmPlan] = {}
    print(f"{device}, M = {args.m}")
    print(
        "| shape | cuBLAS | cuBLAS + ours | best plain (tile) | best LoRA inside (tile) "
        "| rule of thumb, LoRA inside | 16 adapters: cuBLAS + ours | 16 adapters: LoRA tile + "
        "ours | 16 adapters: split form | 16 adapters: one launch | 16 adapters: shrink beside "
        "| plan |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    try:
        for shape in shapes:
            row = tune_shape(
                shape,
                args.m,
                args.replays,
                args.lora_candidates,
                compiler,
                args.route_margin,
                args.route_tiles,
            )
            rows.append(row)
            plan = plan_from(row, args.margin, tuple(args.routes))
            plans[shape_key(row["n"], row["k"])] = plan
            if args.results is not None:
                args.results.write_text(json.dumps({"device": device, "rows": rows}, indent=1))
            bp, bl = row["best_plain"], row["best_lora"]
            print(
                f"| {shape} | {row['cublas_us']:.1f} | {row['cublas_ours_us']:.1f} "
                f"| {bp[5]:.1f} ({_label(bp)}) "
                f"| {bl[5]:.1f} ({_label(bl)}; err {bl[6]:.3f}) "
                f"| {row['default_lora_us']:.1f} "
                f"| {row['several_cublas_ours_us']:.1f} | {row['several_fused_ours_us']:.1f} "
                f"| {row['several_split_us']:.1f} | {row['several_one_launch_us']:.1f} "
                f"| {row['several_shrink_beside_us']:.1f} "
                f"| fuse {'yes' if plan.fuse else 'no'}, plain "
                f"{'ours' if plan.plain_tile else 'cuBLAS'}, several {plan.several.value}"
                f"{_other_tile(plan, bl)} |",
                flush=True,
            )
    finally:
        compiler.close()
    if args.out is not None:
        table = load_table(args.out) if args.out.exists() else {}
        slot_rank = load_slot_rank(args.out) if args.out.exists() else MEASURED_SLOT_RANK
        merge_plans(table, device, plans)
        note = (
            f"Tiles of the fused GEMM per GPU and weight shape (N x K), measured at M = {args.m} "
            "by benchmarks/kernels/tune_gemm_tiles.py; see hi_moe_lora/kernels/gemm_tiles.py."
        )
        args.out.write_text(json.dumps(table_json(table, note, slot_rank), indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
