"""Measure the split form's GEMM tile for calls below the fused GEMM's least rows.

Below 33 rows a plan's ``few_rows`` route (:class:`hi_moe_lora.kernels.gemm_tiles.FewRows`)
runs the split form on the plan's LoRA tile, which ``tune_gemm_tiles.py`` chose at 64 rows. At
8 rows other tiles stream W faster: the best plain Triton tile beat cuBLAS on gate_up by 10 %
(H200, benchmarks/README.md, twentieth window). This script times, per projection at ``--m``
rows, the served op (``hi_moe_lora::gemm_lora_linear`` under ``--specialize-active-lora``, as a
call below the least rows) with the plan's ``few_rows`` on each candidate tile:

- one adapter on every row (the split form over the whole work list: ``one_adapter``), and
- ``--adapters`` adapters dealt round robin (the counted several-adapter step),

on the ``--candidates`` fastest plain tiles of ``tune_gemm_tiles.py``'s grid at these rows and
the tile the table serves now, beside cuBLAS and cuBLAS then our launch. Each form is checked
against a float64 reference first; every variant is compiled up front on ``--threads`` threads
(:func:`hi_moe_lora.kernels.warm_compile.compiling`). Timing as ``tune_gemm_tiles.py``'s: one
CUDA graph over weight copies larger than L2, median of the replays.

A shape's tile changes only where the fastest with one adapter beats the current one by more
than ``--margin`` µs and is not slower with several adapters by more than ``--margin``
(:func:`choose_tile`). A plan without ``few_rows`` (a table fresh from ``tune_gemm_tiles.py``)
is timed with the split form in one launch on the same tiles, and gets a ``few_rows`` where it
beat cuBLAS then our launch with one adapter and with several (:func:`few_rows_from`).
``--out`` writes the ``--table`` (default: the shipped one) with those changes
(:func:`with_few_rows`); serve it with ``HI_MOE_LORA_GEMM_TILES`` or as a ``gpu_e2e.sh``
``+NAME`` label before shipping it.

A plan holds one few-rows tile for every call of 8 to 32 rows. ``--m 8 16 32`` times each row
count (the later counts also on every tile the first timed) and chooses on the sums over the
counts (:func:`combined_row`; the margin counts once per row count), so the tile is the best
over the range, not at one count. A tile that changes is then printed at each count beside the
tile served now (:func:`chosen_at_each_count`).

    python benchmarks/kernels/tune_few_rows.py [--m 8 [16 32]] [--shapes qkv o gate_up down] \\
        [--table hi_moe_lora/kernels/gemm_tiles.json] [--out tiles.json] [--results r.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import torch
from triton.runtime.errors import OutOfResources

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fused_gemm import plans_changed  # type: ignore[import-not-found]
from bench_lora import _graph_time  # type: ignore[import-not-found]  # (timed the same way)
from tune_gemm_tiles import (  # type: ignore[import-not-found]
    POOL_BYTES,
    RANK,
    SHAPES,
    SLOTS,
    _case,
    candidate_tiles,
    cublas_then_ours,
    lora_reference,
)

import hi_moe_lora.kernels.gemm_op  # (registers hi_moe_lora::gemm_lora_linear)
import hi_moe_lora.kernels.ops  # noqa: F401  (registers hi_moe_lora::lora_linear)
from hi_moe_lora.kernels.config import BLOCK_M_LARGE, BLOCK_M_SMALL
from hi_moe_lora.kernels.gemm_lora import FUSED_GEMM_ROWS, launch_plain_gemm
from hi_moe_lora.kernels.gemm_tiles import (
    TABLE_FILE,
    FewRows,
    GemmPlan,
    GemmTile,
    SeveralRoute,
    load_slot_rank,
    load_table,
    shape_key,
    table_json,
)
from hi_moe_lora.kernels.warm_compile import compiling
from hi_moe_lora.kernels.worklist import WorkListBuffers, arrival_counters

#: Largest difference from the float64 reference a timed form may show (bf16; the product
#: benchmark's forms stay within 0.031).
MAX_ERROR = 0.06

#: One tile's times: (µs a call with one adapter, µs with several, largest difference).
Timing = tuple[float, float, float]


def choose_tile(current: GemmTile, timings: dict[GemmTile, Timing], margin: float) -> GemmTile:
    """The tile fastest with one adapter where it beats ``current`` by more than ``margin`` µs
    and is not slower with several adapters by more than ``margin``; else ``current``. Tiles
    off the reference (:data:`MAX_ERROR`) or that did not run (infinite times) never win."""
    if current not in timings:
        return current
    one_now, several_now, _ = timings[current]
    fit = [
        tile
        for tile, (one, several, error) in timings.items()
        if error <= MAX_ERROR and one + margin < one_now and several <= several_now + margin
    ]
    return min(fit, key=lambda tile: timings[tile][0], default=current)


def few_rows_from(plan: GemmPlan, row: dict[str, Any], margin: float) -> FewRows | None:
    """A plan's ``few_rows`` after its shape's measurements (``row``, :func:`tune_shape`'s).

    A plan with one keeps it, on the tile :func:`choose_tile` picks. A plan without one gets
    one (from the rows measured, by the route timed, ``one_adapter``) where the split form on
    its fastest tile beat cuBLAS then our launch by more than ``margin`` µs both with one
    adapter and with several; on that tile, unless it is the plan's LoRA tile. Else None. A
    plan that does not fuse never takes a split form below the least rows: it gets none."""
    timings = timings_of(row)
    if plan.few_rows is not None:
        current = GemmTile(*row["current"])
        pick = choose_tile(current, timings, margin)
        return plan.few_rows if pick == current else replace(plan.few_rows, tile=pick)
    if not plan.fuse:
        return None
    fit = [
        tile
        for tile, (one, several, error) in timings.items()
        if error <= MAX_ERROR
        and one + margin < row["cublas_ours_us"]
        and several + margin < row["cublas_ours_several_us"]
    ]
    if not fit:
        return None
    best = min(fit, key=lambda tile: timings[tile][0])
    tile = None if best == plan.lora_tile else best
    return FewRows(row["m"], SeveralRoute(row["route"]), one_adapter=True, tile=tile)


def with_few_rows(
    table: dict[str, dict[str, GemmPlan]], device: str, few_rows: dict[str, FewRows | None]
) -> dict[str, dict[str, GemmPlan]]:
    """``table`` with ``few_rows`` (by shape key) as ``device``'s plans' ``few_rows``."""
    plans = dict(table[device])
    for key, few in few_rows.items():
        plans[key] = replace(plans[key], few_rows=few)
    return {**table, device: plans}


class Step:
    """A call's device data for one slot per row (``slots``), as the wrapper keeps it."""

    def __init__(self, slots: list[int]) -> None:
        m = len(slots)
        self.work = WorkListBuffers(max(m, 16), SLOTS, "cuda", fused_slot=True)
        self.work.update(slots, [RANK] * SLOTS)
        self.token_slot = torch.tensor(slots, dtype=torch.int32, device="cuda")
        self.ranks = torch.full((SLOTS,), RANK, dtype=torch.int32, device="cuda")
        self.active = torch.tensor([len(set(slots))], dtype=torch.int32)
        self.slots = slots

    def op(self, c: dict[str, Any]) -> None:
        """The served op as a call below the fused GEMM's least rows, counted adapters."""
        work = self.work
        assert work.fused_slot is not None
        assert work.gemm_arrivals is not None
        torch.ops.hi_moe_lora.gemm_lora_linear(
            c["y"], c["x"], c["w"], c["a"], c["b"], work.tiles[BLOCK_M_SMALL],
            work.tiles[BLOCK_M_LARGE], work.rest_tiles[BLOCK_M_SMALL],
            work.rest_tiles[BLOCK_M_LARGE], self.token_slot, work.fused_slot, self.ranks,
            work.counters, work.gemm_arrivals, torch.zeros(1, dtype=torch.bool), 1.0,
            FUSED_GEMM_ROWS[0], FUSED_GEMM_ROWS[1], self.active, True, None, None,
        )  # fmt: skip

    def cublas_ours(self, c: dict[str, Any]) -> None:
        cublas_then_ours(c, self.work, self.ranks)


def _served_plan(table: dict[str, dict[str, GemmPlan]], device: str, key: str) -> GemmPlan:
    plan = table.get(device, {}).get(key)
    if plan is None:
        raise SystemExit(f"{device}: {key}: the table has no plan (tune_gemm_tiles.py first)")
    return plan


def tune_shape(
    shape: str,
    m: int,
    plan: GemmPlan,
    adapters: int,
    candidates: int,
    replays: int,
    threads: int,
    include: Sequence[GemmTile] = (),
) -> dict[str, Any]:
    """Every candidate tile's times for ``shape`` at ``m`` rows (see the module's text), and
    ``include``'s (another row count's candidates)."""
    k, widths = SHAPES[shape]
    n = sum(widths)
    few = plan.few_rows or FewRows(1, SeveralRoute.ONE_LAUNCH)
    current = plan.lora_tile if few.tile is None else few.tile
    cases = _case(k, widths, m, max(2, -(-POOL_BYTES // (n * k * 2))), seed=m + k)
    one = Step([3] * m)
    several = Step([row % adapters for row in range(m)])
    arrivals = arrival_counters("cuda")

    def timed(fn: Any, reference: torch.Tensor) -> tuple[float, float]:
        first = cases[0]
        try:
            first["y"].fill_(float("nan"))
            fn(first)
            torch.cuda.synchronize()
        except OutOfResources:  # (more shared memory than this GPU's SM holds)
            return float("inf"), float("inf")
        error = float((first["y"].double() - reference).abs().max())
        return _graph_time([lambda c=c: fn(c) for c in cases], replays), error

    base_ref = cases[0]["x"].double() @ cases[0]["w"].double().T
    grid = candidate_tiles(n, k, widths, m)
    _compile_all(
        threads,
        [lambda t=tile: launch_plain_gemm(cases[0]["y"], cases[0]["x"], cases[0]["w"], t, arrivals)
         for tile in grid],
    )  # fmt: skip

    def plain(tile: GemmTile) -> Any:
        return lambda c: launch_plain_gemm(c["y"], c["x"], c["w"], tile, arrivals)

    plain_times = {tile: timed(plain(tile), base_ref)[0] for tile in grid}
    ranked = sorted(plain_times, key=lambda tile: plain_times[tile])
    tiles = list(dict.fromkeys([current, *include, *ranked[:candidates]]))

    def on(tile: GemmTile, step: Step) -> Any:
        few_tuned = replace(few, from_rows=1, one_adapter=True, tile=tile)
        tuned = replace(plan, few_rows=few_tuned)  # (the --table's plan, not the served one)

        def call(c: dict[str, Any]) -> None:
            with plans_changed(lambda served: tuned):
                step.op(c)

        return call

    _compile_all(
        threads,
        [lambda t=tile, s=step: on(t, s)(cases[0]) for tile in tiles for step in (one, several)],
    )
    one_ref, several_ref = (lora_reference(cases[0], step.slots) for step in (one, several))
    timings: dict[GemmTile, Timing] = {}
    for tile in tiles:
        t_one, e_one = timed(on(tile, one), one_ref)
        t_several, e_several = timed(on(tile, several), several_ref)
        timings[tile] = (t_one, t_several, max(e_one, e_several))
    return {
        "shape": shape,
        "key": shape_key(n, k),
        "m": m,
        "adapters": adapters,
        "route": few.several.value,
        "cublas_us": timed(lambda c: torch.mm(c["x"], c["w"].T, out=c["y"]), base_ref)[0],
        "cublas_ours_us": timed(one.cublas_ours, one_ref)[0],
        "cublas_ours_several_us": timed(several.cublas_ours, several_ref)[0],
        "current": _fields(current),
        "plain": [[*_fields(tile), us] for tile, us in plain_times.items()],
        "tiles": [[*_fields(tile), *timing] for tile, timing in timings.items()],
    }


def _compile_all(threads: int, launches: list[Any]) -> None:
    """Each launch's variant compiled on ``threads`` threads; where that fails (a tile too large
    for this GPU), the timing compiles what it runs, one by one, and skips what cannot run."""
    try:
        with compiling(threads):
            for launch in launches:
                try:
                    launch()
                except OutOfResources:
                    continue
    except Exception as error:  # (a failed compile raises at the block's end)
        print(f"compiling ahead failed ({error}); compiling as timed", file=sys.stderr)


def _fields(tile: GemmTile) -> list[int]:
    return [tile.block_n, tile.block_k, tile.stages, tile.warps, tile.split_k]


def _label(tile: GemmTile) -> str:
    return " x ".join(str(v) for v in _fields(tile))


def _few_label(plan: GemmPlan, few: FewRows | None) -> str:
    """What the plan's ``few_rows`` becomes, for the printed table."""
    if few is None:
        return "no few_rows (cuBLAS then our launch)"
    tile = _label(plan.lora_tile if few.tile is None else few.tile)
    kept = " (kept)" if few == plan.few_rows else ""
    return f"{few.several.value} from {few.from_rows} rows on {tile}{kept}"


def combined_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One shape's rows at several row counts as one row :func:`few_rows_from` takes: each tile
    timed at every count, with its times summed over the counts (its largest difference from
    the reference kept), and cuBLAS's and our launch's sums; ``m`` is the least count (where a
    new ``few_rows`` starts). A single row is returned as it is."""
    if len(rows) == 1:
        return rows[0]
    each = [timings_of(row) for row in rows]
    common = [tile for tile in each[0] if all(tile in timings for timings in each[1:])]
    tiles = [
        [
            *_fields(tile),
            sum(timings[tile][0] for timings in each),
            sum(timings[tile][1] for timings in each),
            max(timings[tile][2] for timings in each),
        ]
        for tile in common
    ]
    sums = {
        key: sum(row[key] for row in rows)
        for key in ("cublas_us", "cublas_ours_us", "cublas_ours_several_us")
    }
    ms = [row["m"] for row in rows]
    return {**rows[0], **sums, "m": min(ms), "ms": ms, "plain": [], "tiles": tiles}


def tuned_note(previous: str, device: str, ms: list[int], changed: list[str]) -> str:
    """The written table's note: the tuned table's own (its history), then what this run
    changed, so a table tuned again still says where each of its entries came from."""
    shapes = ", ".join(changed) if changed else "none"
    counts = ", ".join(str(m) for m in ms)
    added = (
        f"few_rows re-measured at M = {counts} on {device} by benchmarks/kernels/tune_few_rows.py "
        f"on {date.today().isoformat()} (shapes changed: {shapes}); not yet served."
    )
    return f"{previous} {added}" if previous else added


def chosen_at_each_count(shape: str, tile: GemmTile, rows: list[dict[str, Any]]) -> str:
    """A line with a newly chosen tile's times at each row count timed (µs a call, one adapter
    / several, beside the tile served now), which the table's per-count lines leave out
    unless it was that count's fastest."""
    parts = []
    for row in rows:
        timings = timings_of(row)
        one, several, _ = timings.get(tile, (math.inf, math.inf, math.inf))
        now = timings.get(GemmTile(*row["current"]), (math.inf, math.inf, math.inf))
        parts.append(f"M = {row['m']} {one:.1f} / {several:.1f} (now {now[0]:.1f} / {now[1]:.1f})")
    return f"{shape}: the chosen {_label(tile)} at " + "; ".join(parts)


def timings_of(row: dict[str, Any]) -> dict[GemmTile, Timing]:
    """A result row's tiles and their times, as :func:`choose_tile` takes them."""
    return {GemmTile(*fields[:5]): (fields[5], fields[6], fields[7]) for fields in row["tiles"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    least = FUSED_GEMM_ROWS[0]
    parser.add_argument(
        "--m",
        type=int,
        nargs="+",
        default=[8],
        help=f"token rows, 1-{least - 1} (several: chosen on the sums)",
    )
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--adapters", type=int, default=8, help="the several-adapter step's")
    parser.add_argument("--candidates", type=int, default=8, help="fastest plain tiles tried")
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--threads", type=int, default=16, help="compile threads")
    parser.add_argument("--margin", type=float, default=0.3, help="µs a new tile must win by")
    parser.add_argument("--table", type=Path, default=TABLE_FILE, help="the plans to tune")
    parser.add_argument("--out", type=Path, help="the table with the chosen tiles")
    parser.add_argument("--results", type=Path, help="every tile's times, as JSON")
    args = parser.parse_args(argv)
    ms: list[int] = list(dict.fromkeys(args.m))
    if not all(1 <= m < least for m in ms):
        parser.error(f"--m is from 1 to {least - 1} rows (fewer than the fused GEMM's least)")
    fewest = min((m for m in ms if m > 1), default=1)
    if not 2 <= args.adapters <= min(fewest, SLOTS) and fewest > 1:
        parser.error(f"--adapters is from 2 to {min(fewest, SLOTS)} at {fewest} rows")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    device = torch.cuda.get_device_name()
    table = load_table(args.table)
    rows: list[dict[str, Any]] = []
    updates: dict[str, FewRows | None] = {}
    picks: list[str] = []
    counts = ", ".join(str(m) for m in ms)
    print(f"{device}, M = {counts}, {args.adapters} adapters for several; µs a call")
    print(
        "| shape | cuBLAS | cuBLAS + ours: one / several | tile now: one / several "
        "| fastest with one adapter: tile, one / several | chosen |"
    )
    print("|---|---|---|---|---|---|")
    for shape in args.shapes:
        k, widths = SHAPES[shape]
        plan = _served_plan(table, device, shape_key(sum(widths), k))
        if not plan.fuse:
            print(f"| {shape} | its plan does not fuse: no split form below the least rows |")
            continue
        shape_rows: list[dict[str, Any]] = []
        for m in ms:
            # (every count also times the first count's tiles: the sums need each at all counts)
            include = list(timings_of(shape_rows[0])) if shape_rows else []
            row = tune_shape(
                shape, m, plan, args.adapters, args.candidates, args.replays, args.threads, include
            )
            shape_rows.append(row)
            rows.append(row)
            if args.results is not None:
                args.results.write_text(json.dumps({"device": device, "rows": rows}, indent=1))
            if len(ms) > 1:
                print(_line(f"{shape}, M = {m}", row, ""), flush=True)
        row = combined_row(shape_rows)
        few = few_rows_from(plan, row, args.margin * len(ms))
        if few != plan.few_rows:
            updates[row["key"]] = few
        label = shape if len(ms) == 1 else f"{shape}, the sum"
        print(_line(label, row, _few_label(plan, few)), flush=True)
        if few is not None and few.tile is not None and few != plan.few_rows and len(ms) > 1:
            picks.append(chosen_at_each_count(shape, few.tile, shape_rows))
    for pick in picks:  # (the table prints each count's fastest and the tile now, not the pick)
        print(pick)
    if args.out is not None:
        tuned = with_few_rows(table, device, updates)
        previous = json.loads(args.table.read_text(encoding="utf-8")).get("note", "")
        note = tuned_note(previous, device, ms, sorted(updates))
        raw = table_json(tuned, note, load_slot_rank(args.table))
        args.out.write_text(json.dumps(raw, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


def _line(label: str, row: dict[str, Any], chosen: str) -> str:
    """A row of the printed table (``chosen``: what the plan's ``few_rows`` becomes)."""
    timings = timings_of(row)
    current = GemmTile(*row["current"])
    fastest = min(timings, key=lambda tile: timings[tile][0])
    now, best = timings.get(current, (math.inf, math.inf, math.inf)), timings[fastest]
    return (
        f"| {label} | {row['cublas_us']:.1f} | {row['cublas_ours_us']:.1f} / "
        f"{row['cublas_ours_several_us']:.1f} | {now[0]:.1f} / {now[1]:.1f} "
        f"| {_label(fastest)}, {best[0]:.1f} / {best[1]:.1f} (err {best[2]:.3f}) | {chosen} |"
    )


if __name__ == "__main__":
    raise SystemExit(main())
