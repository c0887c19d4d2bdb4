"""The split form's shrink as a dense product: every row of ``x`` times every slot's A.

The work-list shrink (:mod:`.gemm_shrink`) gathers each token tile's rows and multiplies them by
that tile's adapter's A. Each of its programs first loads the tile count, then the tile's
record, then the rows: three dependent round trips before the first byte of A arrives, and at
16 adapters it took 5.9-11.1 µs a projection, 64 rows, where its bytes (every active slot's A)
stream in 1-2 (H200, benchmarks/README.md, sixteenth window).

This launch skips the work list. One program per (group of slots, slice, run of K) multiplies
*all* ``m`` rows (at most 64, one ``tl.dot`` row tile) by its group's slots' A side by side
(``SLOTS`` slots of ``R_PAD`` rank rows: a 64-column B operand at rank 16), over a run of K, and
stores the fp32 partial. The rows it multiplies by another slot's A cost tensor-core time only,
which a 64-row decode call has to spare. Its first round trip loads the step's fused slot and
the rows' slots (``token_slot``) beside nothing that depends on them; a group whose slots no
row uses, or any group in a step whose one adapter rides inside the GEMM (fused slot set),
returns there. The last program of a (group, slice) to arrive sums the runs' partials in run
order (a fixed sum), and for each row whose slot is in its group stores that slot's columns
into ``out[token, slice, :]``: the intermediate :func:`.gemm_shrink.launch_gemm_shrink` writes,
so the GEMM's epilogue (:class:`.gemm_lora.GemmExpand`) reads it unchanged. Rows without an
adapter are never written.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from .gemm_shrink import SHRINK_BLOCK_K, GemmShrinkShapeError, rank_padding
from .kernel_flavour import kernel_for
from .tensor_table import element_offsets

#: Rows a call may have (one ``tl.dot`` row tile: a decode call of up to 64 requests).
DENSE_MAX_ROWS = 64
#: The product's columns a program takes (slots side by side, each at the rank padding), and K
#: steps a run holds (measured at 16 adapters, 64 rows: benchmarks/kernels/bench_fused_gemm.py).
DENSE_COLUMNS = 64
DENSE_RUN_STEPS = 4


def dense_runs(k: int, steps: int = DENSE_RUN_STEPS) -> int | None:
    """How many runs of K the dense shrink takes; None where K is not a whole number of runs."""
    run = SHRINK_BLOCK_K * steps
    return k // run if k % run == 0 else None


def _dense_shrink_kernel(  # type: ignore[no-untyped-def]
    x_ptr,
    lora_base_ptr,
    a_off0,
    a_off1,
    a_off2,
    token_slot_ptr,
    fused_slot_ptr,
    partials_ptr,
    arrivals_ptr,
    out_ptr,
    m,
    k,
    rank,
    num_slots,
    BLOCK_M: tl.constexpr,
    SLOTS: tl.constexpr,
    R_PAD: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STEPS: tl.constexpr,
    RUNS: tl.constexpr,
    SLICES: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """One program: (group of ``SLOTS`` slots, slice, run of K) from the grid's three axes."""
    group = tl.program_id(0)
    piece = tl.program_id(1)
    run = tl.program_id(2)
    rows = tl.arange(0, BLOCK_M)
    row_ok = rows < m
    first_slot = group * SLOTS
    token_slot = tl.load(token_slot_ptr + rows, mask=row_ok, other=-1)
    mine = (token_slot >= first_slot) & (token_slot < first_slot + SLOTS)
    used = tl.reduce(mine.to(tl.int32), 0, tl.standard._elementwise_max)  # (see rank_scan)
    live = (tl.load(fused_slot_ptr) < 0) & (used > 0)
    if live:
        cols = tl.arange(0, SLOTS * R_PAD)
        col_slot = (first_slot + cols // R_PAD).to(tl.int64)
        col_rank = cols % R_PAD
        col_ok = (col_slot < num_slots) & (col_rank < rank)
        a_off = tl.where(piece == 2, a_off2, tl.where(piece == 1, a_off1, a_off0))
        k_first = run * (BLOCK_K * STEPS)
        steps = tl.arange(0, BLOCK_K)
        x_ptrs = x_ptr + rows[:, None].to(tl.int64) * k + k_first + steps[None, :]
        a_ptrs = (
            lora_base_ptr + a_off + (col_slot * rank + col_rank)[None, :] * k
            + k_first + steps[:, None]
        )  # fmt: skip
        acc = tl.full((BLOCK_M, SLOTS * R_PAD), 0.0, tl.float32)
        for step in tl.static_range(STEPS):
            xt = tl.load(x_ptrs + step * BLOCK_K, mask=row_ok[:, None], other=0.0)
            at = tl.load(a_ptrs + step * BLOCK_K, mask=col_ok[None, :], other=0.0)
            if UPCAST_DOT:
                xt = xt.to(tl.float32)
                at = at.to(tl.float32)
            acc = tl.dot(xt, at, acc)
        width = SLOTS * R_PAD
        part = BLOCK_M * width
        base = (group * SLICES + piece) * RUNS * part
        tl.store(partials_ptr + base + run * part + rows[:, None] * width + cols[None, :], acc)
        tl.debug_barrier()  # (every thread's partial stored before the arrival is counted)
        counter = arrivals_ptr + group * SLICES + piece
        if tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") == RUNS - 1:
            ranks = tl.arange(0, R_PAD)
            own = tl.where(mine, token_slot - first_slot, 0) * R_PAD
            at_row = base + rows[:, None] * width + own[:, None] + ranks[None, :]
            total = tl.full((BLOCK_M, R_PAD), 0.0, tl.float32)
            for other in tl.static_range(RUNS):  # (in run order: a fixed sum)
                total += tl.load(
                    partials_ptr + at_row + other * part,
                    mask=mine[:, None],
                    other=0.0,
                    cache_modifier=".cg",
                )
            out = out_ptr + (rows[:, None] * SLICES + piece) * R_PAD + ranks[None, :]
            tl.store(out, total, mask=mine[:, None])
            tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")


def _dense_columns(r_pad: int, columns: int) -> int:
    """Slots a program takes side by side: ``columns`` of the product, at least one slot."""
    return max(1, columns // r_pad)


def launch_dense_shrink(
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    token_slot: torch.Tensor,
    fused_slot: torch.Tensor,
    arrivals: torch.Tensor,
    columns: int = DENSE_COLUMNS,
    steps: int = DENSE_RUN_STEPS,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The fp32 intermediate ``(m, slices, rank padding)``: ``x[t] A[token_slot[t]]^T``
    (unscaled) for every row with a slot, none when ``fused_slot[0]`` is set (that step's LoRA
    rides inside the GEMM); rows without a slot are left unwritten. ``lora_a``: vLLM's stacked
    A per slice, ``(slots, 1, rank, k)``; ``arrivals``: zeroed counters
    (:func:`.gemm_lora.arrival_counters`), left zeroed; ``out``: the intermediate to write (a new
    one by default). :class:`GemmShrinkShapeError` where the call does not fit (more than
    :data:`DENSE_MAX_ROWS` rows, K not in whole runs)."""
    m, k = x.shape
    runs = dense_runs(k, steps)
    if not 1 <= m <= DENSE_MAX_ROWS or runs is None or not 1 <= len(lora_a) <= 3:
        raise GemmShrinkShapeError(
            f"{m} rows, {len(lora_a)} slices of K {k}: no dense shrink for this shape"
        )
    if not x.is_contiguous():
        raise GemmShrinkShapeError("x must be contiguous")
    num_slots, _, rank, _ = lora_a[0].shape
    for a in lora_a:
        if a.shape != (num_slots, 1, rank, k) or not a.is_contiguous() or a.dtype != x.dtype:
            raise GemmShrinkShapeError(f"A {tuple(a.shape)} does not fit rank {rank}, K {k}")
    if token_slot.numel() < m or token_slot.device != x.device:
        raise GemmShrinkShapeError(f"token_slot needs {m} rows on {x.device}")
    slices = len(lora_a)
    r_pad = rank_padding(rank)
    slots_each = _dense_columns(r_pad, columns)
    groups = -(-num_slots // slots_each)
    if arrivals.numel() < groups * slices or arrivals.device != x.device:
        raise GemmShrinkShapeError(f"{groups * slices} arrival counters needed on {x.device}")
    table = element_offsets(list(lora_a))
    if table is None:
        raise GemmShrinkShapeError("the slices' A must share a dtype and a device")
    base, offsets = table
    a_offs = [offsets[min(i, slices - 1)] for i in range(3)]
    block_m = max(16, int(triton.next_power_of_2(m)))
    shape = (m, slices, r_pad)
    if out is None:
        out = torch.empty(shape, dtype=torch.float32, device=x.device)
    elif out.shape != shape or out.dtype != torch.float32 or not out.is_contiguous():
        raise GemmShrinkShapeError(f"out must be a contiguous float32 {shape}")
    partials = torch.empty(
        (groups, slices, runs, block_m, slots_each * r_pad), dtype=torch.float32, device=x.device
    )
    kernel, interpreted = kernel_for(_dense_shrink_kernel, x, ("m",))
    kernel[(groups, slices, runs)](
        x, base, *a_offs, token_slot, fused_slot, partials, arrivals, out, m, k, rank, num_slots,
        BLOCK_M=block_m, SLOTS=slots_each, R_PAD=r_pad, BLOCK_K=SHRINK_BLOCK_K, STEPS=steps,
        RUNS=runs, SLICES=slices, UPCAST_DOT=interpreted, num_warps=4, num_stages=1,
    )  # fmt: skip
    return out
