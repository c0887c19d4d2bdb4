"""The shrink of a several-adapter step, ahead of the base GEMM that expands it (split form).

A step that serves several adapters cannot carry their shrinks inside the base GEMM the way
:mod:`.gemm_lora` carries one adapter's: every program would read every active adapter's A. So
such a step runs its shrink first, in a short launch of its own, and the GEMM then adds each
token's expand in its epilogue (:class:`.gemm_lora.GemmExpand`), in place of our launch after
the GEMM (a chain of dependent round trips that cost 12-20 µs a projection at 16 adapters, H200,
benchmarks/README.md, thirteenth window).

One program per (token tile of the work list, slice, run of K): it multiplies its tile's rows of
``x`` by the tile's adapter's A, up to that adapter's own rank (the tile record's) in parts of
:data:`RANK_PART` ranks, not the slots' ``--max-lora-rank``, over a short run of K (a few steps:
the launch's time is its longest chain of dependent loads, and a first form with eight runs of K
took 8-21 µs, H200, 2026-11-28) and stores the fp32 partial. The last program of its (tile,
slice) to arrive sums the partials in run order (the same sum whichever arrives last) into
``out[token, slice, :]`` and resets its arrival counter, so the GEMM reads one finished
intermediate. Rows of tokens without an adapter are never written nor read. Programs past the
step's tile count (the grid is sized for the most tiles a call can meet) return at once, so an
empty list (a one-adapter step, whose LoRA rides inside the GEMM) costs one near-empty launch.

A program's work is a device function (:func:`shrink_program`), so the GEMM's launch can hold the
shrink instead (the split form in one launch): :func:`take_shrink_jobs` runs its (tile, slice,
run) jobs by ticket and counts each finished sum per slice for the epilogues that wait on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .kernel_flavour import kernel_for
from .tensor_table import element_offsets
from .warm_compile import launch
from .worklist import HEADER_SIZE, upper_bound_tiles

#: K elements a shrink program loads a step, and the steps a run of K holds.
SHRINK_BLOCK_K = 128
RUN_STEPS = 2
#: Ranks a program shrinks at once (``tl.dot``'s least width): an adapter takes as many parts
#: as its own rank needs, whatever the slots' rank (the GEMM's expand takes the same parts).
RANK_PART = tl.constexpr(16)


class GemmShrinkShapeError(ValueError):
    """The call's tensors do not fit the shrink's layout."""


def shrink_runs(k: int, steps: int = RUN_STEPS) -> int | None:
    """How many runs of K the shrink takes (each ``steps`` steps); None where K is not a
    whole number of runs (the split form then does not apply)."""
    run = SHRINK_BLOCK_K * steps
    return k // run if k % run == 0 else None


def shrink_program(  # type: ignore[no-untyped-def]
    x_ptr,
    lora_base_ptr,
    a_off0,
    a_off1,
    a_off2,
    tiles_ptr,
    partials_ptr,
    arrivals_ptr,
    out_ptr,
    done_ptr,
    m,
    k,
    rank,
    tile,
    piece,
    run,
    TILE_M: tl.constexpr,
    HEADER: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STEPS: tl.constexpr,
    RUNS: tl.constexpr,
    R_PAD: tl.constexpr,
    SLICES: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    COUNT_DONE: tl.constexpr,
):
    """One program's work (a device function: this module's launch, and the one-launch split
    form of :mod:`.gemm_lora`): the token tile ``tile``'s rows times its adapter's A of slice
    ``piece``, over the ``run``-th run of K; the last of the (tile, slice)'s runs to arrive sums
    them all into ``out``. ``COUNT_DONE``: that program then counts the finished sum at
    ``done_ptr[piece]`` (release: the sum is visible to whoever reads the count)."""
    if tile < tl.load(tiles_ptr):
        record = tiles_ptr + HEADER + tile * (3 + TILE_M)
        slot = tl.load(record).to(tl.int64)
        tile_rank = tl.minimum(tl.load(record + 1), rank)
        length = tl.load(record + 2)
        within = tl.arange(0, TILE_M)
        row_ok = within < length
        rows = tl.load(record + 3 + within, mask=row_ok, other=0).to(tl.int64)
        a_off = tl.where(piece == 2, a_off2, tl.where(piece == 1, a_off1, a_off0))
        k_first = run * (BLOCK_K * STEPS)
        part_ranks = tl.arange(0, RANK_PART)
        steps = tl.arange(0, BLOCK_K)
        x_ptrs = x_ptr + rows[:, None] * k + k_first + steps[None, :]
        mine = (tile * SLICES + piece) * RUNS
        # The ranks in parts of RANK_PART, up to the tile's own (A is zero past it): a rank-16
        # adapter in rank-64 slots takes one part, as in rank-16 slots, with as few registers.
        for part in tl.static_range(R_PAD // RANK_PART):
            if part * RANK_PART < tile_rank:
                ranks = part * RANK_PART + part_ranks
                a_ptrs = (
                    lora_base_ptr + a_off + slot * rank * k + ranks[None, :] * k
                    + k_first + steps[:, None]
                )  # fmt: skip
                rank_ok = ranks < tile_rank
                acc = tl.full((TILE_M, RANK_PART), 0.0, tl.float32)
                for step in tl.static_range(STEPS):
                    xt = tl.load(x_ptrs + step * BLOCK_K, mask=row_ok[:, None], other=0.0)
                    at = tl.load(a_ptrs + step * BLOCK_K, mask=rank_ok[None, :], other=0.0)
                    if UPCAST_DOT:
                        xt = xt.to(tl.float32)
                        at = at.to(tl.float32)
                    acc = tl.dot(xt, at, acc)
                at_run = (mine + run) * TILE_M * R_PAD + within[:, None] * R_PAD + ranks[None, :]
                tl.store(partials_ptr + at_run, acc)
        tl.debug_barrier()  # (every thread's partial stored before the arrival is counted)
        counter = arrivals_ptr + tile * SLICES + piece
        if tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") == RUNS - 1:
            for part in tl.static_range(R_PAD // RANK_PART):  # (zeros past the tile's rank)
                ranks = part * RANK_PART + part_ranks
                total = tl.full((TILE_M, RANK_PART), 0.0, tl.float32)
                if part * RANK_PART < tile_rank:
                    first = mine * TILE_M * R_PAD + within[:, None] * R_PAD + ranks[None, :]
                    for other in tl.static_range(RUNS):  # (in run order: a fixed sum)
                        total += tl.load(
                            partials_ptr + first + other * TILE_M * R_PAD, cache_modifier=".cg"
                        )
                out = out_ptr + (rows[:, None] * SLICES + piece) * R_PAD + ranks[None, :]
                tl.store(out, total, mask=row_ok[:, None])
            tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")
            if COUNT_DONE:
                tl.debug_barrier()  # (every thread's share of the sum stored first)
                tl.atomic_add(done_ptr + piece, 1, sem="release", scope="gpu")


def take_shrink_jobs(  # type: ignore[no-untyped-def]
    x_ptr,
    lora_base_ptr,
    a_off0,
    a_off1,
    a_off2,
    tiles_ptr,
    partials_ptr,
    arrivals_ptr,
    out_ptr,
    jobs_ptr,
    done_ptr,
    m,
    k,
    rank,
    JOBS: tl.constexpr,
    TILE_M: tl.constexpr,
    HEADER: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STEPS: tl.constexpr,
    RUNS: tl.constexpr,
    R_PAD: tl.constexpr,
    SLICES: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """Run the shrink's (tile, slice, run of K) jobs by ticket (``jobs_ptr``, counted past
    ``JOBS`` once all are taken) until none is left, each finished sum counted at
    ``done_ptr[slice]`` (a device function: the GEMM's launch holds the shrink this way, so a
    program that returns from here has left no job untaken)."""
    job = tl.atomic_add(jobs_ptr, 1, sem="relaxed", scope="gpu")
    while job < JOBS:  # (tile by tile: a tile's slices and runs together)
        shrink_program(
            x_ptr, lora_base_ptr, a_off0, a_off1, a_off2, tiles_ptr, partials_ptr, arrivals_ptr,
            out_ptr, done_ptr, m, k, rank, job // (RUNS * SLICES), job // RUNS % SLICES,
            job % RUNS, TILE_M, HEADER, BLOCK_K, STEPS, RUNS, R_PAD, SLICES, UPCAST_DOT, True,
        )  # fmt: skip
        job = tl.atomic_add(jobs_ptr, 1, sem="relaxed", scope="gpu")


def _gemm_shrink_kernel(  # type: ignore[no-untyped-def]
    x_ptr,
    lora_base_ptr,
    a_off0,
    a_off1,
    a_off2,
    tiles_ptr,
    partials_ptr,
    arrivals_ptr,
    out_ptr,
    m,
    k,
    rank,
    TILE_M: tl.constexpr,
    HEADER: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STEPS: tl.constexpr,
    RUNS: tl.constexpr,
    R_PAD: tl.constexpr,
    SLICES: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """One program: (token tile, slice, run of K) from the grid's three axes."""
    shrink_program(
        x_ptr, lora_base_ptr, a_off0, a_off1, a_off2, tiles_ptr, partials_ptr, arrivals_ptr,
        out_ptr, arrivals_ptr, m, k, rank, tl.program_id(0), tl.program_id(1),
        tl.program_id(2), TILE_M, HEADER, BLOCK_K, STEPS, RUNS, R_PAD, SLICES, UPCAST_DOT, False,
    )  # fmt: skip


def rank_padding(rank: int) -> int:
    """The intermediate's padded width: a power of two, at least ``tl.dot``'s 16."""
    return max(16, int(triton.next_power_of_2(rank)))


@dataclass(frozen=True)
class ShrinkLaunch:
    """A shrink's launch, its tensors made and checked: where it runs alone
    (:func:`launch_gemm_shrink`) or inside the GEMM's launch (:mod:`.gemm_lora`)."""

    #: The fp32 intermediate ``(m, slices, rank padding)`` the shrink writes.
    out: torch.Tensor
    #: The work list and its tiles' rows.
    tiles: torch.Tensor
    tile_m: int
    #: The runs' fp32 partials and the (tile, slice) arrival counters (zeroed, left zeroed).
    partials: torch.Tensor
    arrivals: torch.Tensor
    #: K steps a run holds, and the runs K takes.
    steps: int
    runs: int
    #: The most tiles the list can meet (the grid's first axis where it runs alone).
    most_tiles: int

    @property
    def jobs(self) -> int:
        """Its (tile, slice, run of K) jobs: one program each where it runs alone."""
        return self.most_tiles * self.out.shape[1] * self.runs


def prepare_shrink(
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    tiles: torch.Tensor,
    tile_m: int,
    num_slots: int,
    arrivals: torch.Tensor,
    steps: int = RUN_STEPS,
) -> ShrinkLaunch:
    """Check a shrink call's tensors and make its intermediate and partials (runs of ``steps``
    K steps); :class:`GemmShrinkShapeError` where they do not fit."""
    m, k = x.shape
    runs = shrink_runs(k, steps)
    rank = lora_a[0].shape[2] if lora_a else 0
    if runs is None or not 1 <= len(lora_a) <= 3:
        raise GemmShrinkShapeError(f"{len(lora_a)} slices of K {k}: no shrink for this shape")
    for a in lora_a:
        if a.shape[2:] != (rank, k) or not a.is_contiguous() or a.dtype != x.dtype:
            raise GemmShrinkShapeError(f"A {tuple(a.shape)} does not fit rank {rank}, K {k}")
    if not x.is_contiguous():
        raise GemmShrinkShapeError("x must be contiguous")
    slices = len(lora_a)
    most_tiles = upper_bound_tiles(m, num_slots, tile_m)
    if arrivals.numel() < most_tiles * slices or arrivals.device != x.device:
        raise GemmShrinkShapeError(f"{most_tiles * slices} arrival counters needed on {x.device}")
    r_pad = rank_padding(rank)
    out = torch.empty((m, slices, r_pad), dtype=torch.float32, device=x.device)
    partials = torch.empty(
        (most_tiles, slices, runs, tile_m, r_pad), dtype=torch.float32, device=x.device
    )
    return ShrinkLaunch(out, tiles, tile_m, partials, arrivals, steps, runs, most_tiles)


def launch_gemm_shrink(
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    tiles: torch.Tensor,
    tile_m: int,
    num_slots: int,
    arrivals: torch.Tensor,
) -> torch.Tensor:
    """The fp32 intermediate ``(m, slices, rank padding)``: ``x[t] A[slot(t)]^T`` (unscaled)
    for the tokens of the work list ``tiles`` (its ``tile_m``-row list); rows of tokens the list
    does not hold are left unwritten. ``arrivals``: zeroed counters
    (:func:`.worklist.arrival_counters`), left zeroed."""
    shrink = prepare_shrink(x, lora_a, tiles, tile_m, num_slots, arrivals)
    table = element_offsets(list(lora_a))
    if table is None:
        raise GemmShrinkShapeError("the slices' A must share a dtype and a device")
    base, offsets = table
    slices = len(lora_a)
    a_offs = [offsets[min(i, slices - 1)] for i in range(3)]
    m, k = x.shape
    rank = lora_a[0].shape[2]
    kernel, interpreted = kernel_for(_gemm_shrink_kernel, x, ("m",), (shrink_program,))
    launch(
        kernel, (shrink.most_tiles, slices, shrink.runs),
        x, base, *a_offs, tiles, shrink.partials, arrivals, shrink.out, m, k, rank,
        TILE_M=tile_m, HEADER=HEADER_SIZE, BLOCK_K=SHRINK_BLOCK_K, STEPS=shrink.steps,
        RUNS=shrink.runs, R_PAD=rank_padding(rank), SLICES=slices, UPCAST_DOT=interpreted,
        num_warps=4, num_stages=1,
    )  # fmt: skip
    return shrink.out
