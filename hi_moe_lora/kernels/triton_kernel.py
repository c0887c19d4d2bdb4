"""The fused multi-LoRA Triton kernel: shrink and expand in one launch per wrapped linear.

One launch does all of a wrapped linear's LoRA, every slice of a packed layer (qkv, gate_up)
included. Its programs take jobs from a ticket counter, in this order:

1. shrink jobs, one per (token tile, slice, K chunk): gather the tile's token rows of ``x``,
   multiply by the chunk of ``A[slot]``, store the float32 partial and count the arrival for
   the (tile, slice) pair;
2. expand jobs, one per (token tile, output tile group): load B and y first, wait for the
   pair, sum its partials in a fixed order (deterministic, no float atomics), scale, round to
   the weights' dtype, multiply by ``B[slot]`` and add into ``y``.
Both take a tile's adapter at one of two rank widths, chosen per tile from its real rank (read
from the tile record): ``BLOCK_R`` rows when the rank fits (a rank-16 adapter costs the same
under any ``max_lora_rank``), else the whole padded rank ``RANK_PAD``, in steps no larger than
the narrow ones (see ``_job``). The rank-sized scratch tiles are ``RANK_PAD`` wide. At decode
sizes a wide tile's jobs may be split (``WIDE_SPLIT`` parts, or half as many): each shrink job
takes a part of its rank rows, each expand job a part of a narrow job's columns; the kernel picks
the most parts for which all wide jobs fit ``split_jobs``. The work list puts the wide tiles
first, and the tickets go: wide tiles' shrink jobs, narrow ones', wide expand jobs, narrow ones'.
When re-reading the partials in every expand job would cost too much (wide layers at high rank),
the shrink job that arrives last sums them once into a rank-sized intermediate and raises the
pair's ready flag instead (``REDUCE_IN_EXPAND`` off; chosen for each rank width, since a wide
tile's partials are ``RANK_PAD / BLOCK_R`` times larger: ``WIDE_REDUCE_IN_EXPAND``).

Tickets are taken in order, so every shrink job is held by a running program before any expand
job is handed out: the wait cannot deadlock whatever the grid or the occupancy. Only as many
programs as the step has jobs take tickets (the grid is sized for the most a step can have), and
tickets are relaxed atomics: they order nothing but themselves. The taker that takes the very
last ticket (all others have then finished) resets the counters to zero, so no memset is needed
before the next launch. The intermediate never leaves L2-sized scratch (a few KiB per tile);
there is no separate buffer-zeroing launch and no split-K atomics on data.

The grid is sized from static values only (token count of the call, slot count, layer widths);
the number of tiles present this step is read from the work list on the device, so a CUDA
graph captured once stays valid for every step.

Written for both Triton 3.6 (GPU hosts) and 3.9 (the CPU interpreter of CI). The 3.9
interpreter miscomputes ``tl.dot`` on bfloat16 operands, so on CPU bfloat16 products are taken in
float32 after the same rounding points (``UPCAST_DOT``); the GPU path multiplies in bfloat16.
"""

from __future__ import annotations

import functools
import logging
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from .config import (
    PREFILL_BUCKETS,
    WIDE_SPLIT_WAVES,
    KernelConfigError,
    TileConfig,
    choose_config,
)
from .reference_loops import stacked_view
from .worklist import (
    HEADER_SIZE,
    MAX_SLICES,
    pairs_in_counters,
    record_size,
    upper_bound_tiles,
)

logger = logging.getLogger(__name__)

#: Programs per SM: enough to hide latency, few enough that idle programs cost one wave.
PROGRAMS_PER_SM = 2
#: Where the work list's tile records start, past its header (the kernel's view of it).
_RECORDS_AT = tl.constexpr(HEADER_SIZE)


class FusedLoRAShapeError(ValueError):
    """The stacked weights or activations do not have the layout the kernel needs."""


class KernelCompileError(RuntimeError):
    """The kernel's JIT function does not declare what the launcher passes as constexpr."""


def _tile_record(  # type: ignore[no-untyped-def]
    tiles_ptr,
    mt,
    m_rows,
    min_rank,
    BLOCK_M: tl.constexpr,
):
    """Slot, token rows, row mask and rank of token tile ``mt``, in one round trip.

    Every record holds ``BLOCK_M`` token rows (unused ones are row 0), so the rows are loaded
    unmasked, side by side with the length, instead of after it.
    """
    rec = tiles_ptr + _RECORDS_AT + mt * (3 + BLOCK_M)
    offs_m = tl.arange(0, BLOCK_M)
    slot = tl.load(rec)
    rank = tl.load(rec + 1)
    count = tl.load(rec + 2)
    tok = tl.load(rec + 3 + offs_m)
    rank = tl.where(rank < min_rank, min_rank, rank)
    m_mask = (offs_m < count) & (tok < m_rows)
    return slot.to(tl.int64), tok.to(tl.int64), m_mask, rank


def _mma(a, b, UPCAST_DOT: tl.constexpr):  # type: ignore[no-untyped-def]
    """``a @ b`` accumulated in float32 (operands upcast first on the CPU interpreter)."""
    if UPCAST_DOT:
        return tl.dot(a.to(tl.float32), b.to(tl.float32))
    return tl.dot(a.to(b.dtype), b)


def _rank_tile_offsets(  # type: ignore[no-untyped-def]
    r0,
    BLOCK_M: tl.constexpr,
    R: tl.constexpr,
    RANK_PAD: tl.constexpr,
):
    """Offsets of rank columns ``r0 .. r0 + R`` in a ``BLOCK_M x RANK_PAD`` scratch tile."""
    return tl.arange(0, BLOCK_M)[:, None] * RANK_PAD + r0 + tl.arange(0, R)[None, :]


def _sum_partials(  # type: ignore[no-untyped-def]
    part_ptr,
    pair,
    r0,
    K_SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    R: tl.constexpr,
    RANK_PAD: tl.constexpr,
):
    """Rank columns ``r0 .. r0 + R`` of a pair's shrink, its K chunks summed in order."""
    offs = _rank_tile_offsets(r0, BLOCK_M, R, RANK_PAD)
    summed = tl.full((BLOCK_M, R), 0.0, tl.float32)
    first = pair.to(tl.int64) * K_SPLIT
    for i in tl.static_range(K_SPLIT):
        summed += tl.load(
            part_ptr + (first + i) * (BLOCK_M * RANK_PAD) + offs, cache_modifier=".cg"
        )
    return summed


def _intermediate(  # type: ignore[no-untyped-def]
    part_ptr,
    inter_ptr,
    pair,
    r0,
    scale,
    K_SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    R: tl.constexpr,
    RANK_PAD: tl.constexpr,
    REDUCE_IN_EXPAND: tl.constexpr,
):
    """Rank columns ``r0 .. r0 + R`` of a pair's scaled intermediate, in the weights' dtype:
    summed here from the partials, or loaded as the reducing shrink job stored it."""
    if REDUCE_IN_EXPAND:
        summed = _sum_partials(part_ptr, pair, r0, K_SPLIT, BLOCK_M, R, RANK_PAD)
        return (summed * scale).to(inter_ptr.dtype.element_ty)
    offs = _rank_tile_offsets(r0, BLOCK_M, R, RANK_PAD)
    return tl.load(
        inter_ptr + pair.to(tl.int64) * (BLOCK_M * RANK_PAD) + offs, cache_modifier=".cg"
    )


def _shrink_step(  # type: ignore[no-untyped-def]
    x_ptr,
    a_base,
    tok64,
    m_mask,
    rank,
    offs_k,
    k_dim,
    stride_xm,
    stride_xk,
    a_row_stride,
    R: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """``x @ A[slot].T`` over input columns ``offs_k``, rank rows ``0 .. R`` (zero from
    ``rank`` on), in float32."""
    rows = tl.arange(0, R)
    k_mask = offs_k < k_dim
    xt = tl.load(
        x_ptr + tok64[:, None] * stride_xm + offs_k[None, :] * stride_xk,
        mask=m_mask[:, None] & k_mask[None, :],
        other=0.0,
    )
    at = tl.load(
        a_base + rows[None, :] * a_row_stride + offs_k[:, None],
        mask=(rows < rank)[None, :] & k_mask[:, None],
        other=0.0,
    )
    return _mma(xt, at, UPCAST_DOT)


def _shrink_partial(  # type: ignore[no-untyped-def]
    x_ptr,
    a_base,
    tok64,
    m_mask,
    rank,
    ks,
    k_dim,
    stride_xm,
    stride_xk,
    a_row_stride,
    K_ITERS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    R: tl.constexpr,
    UNROLL: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """Rank rows ``0 .. R`` of ``x @ A[slot].T`` over K chunk ``ks`` (``K_ITERS`` steps of
    ``BLOCK_K``), in float32. ``UNROLL`` unrolls the steps: no store lies between them, so the
    compiler may issue later steps' loads early."""
    offs_kb = ks * (BLOCK_K * K_ITERS) + tl.arange(0, BLOCK_K)
    acc = tl.full((BLOCK_M, R), 0.0, tl.float32)
    if UNROLL:
        for it in tl.static_range(K_ITERS):
            acc += _shrink_step(
                x_ptr, a_base, tok64, m_mask, rank, offs_kb + it * BLOCK_K, k_dim, stride_xm,
                stride_xk, a_row_stride, R, UPCAST_DOT,
            )  # fmt: skip
    else:
        for it in range(K_ITERS):
            acc += _shrink_step(
                x_ptr, a_base, tok64, m_mask, rank, offs_kb + it * BLOCK_K, k_dim, stride_xm,
                stride_xk, a_row_stride, R, UPCAST_DOT,
            )  # fmt: skip
    return acc


def _shrink_job(  # type: ignore[no-untyped-def]
    within,
    mt,
    slot,
    tok64,
    m_mask,
    rank,
    x_ptr,
    a0_ptr,
    a1_ptr,
    a2_ptr,
    part_ptr,
    inter_ptr,
    arrive_ptr,
    ready_ptr,
    k_dim,
    stride_xm,
    stride_xk,
    a_slot_stride,
    a_row_stride,
    scale,
    NUM_SLICES: tl.constexpr,
    K_SPLIT: tl.constexpr,
    K_ITERS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    R: tl.constexpr,
    PARTS: tl.constexpr,
    WIDE_SPLIT: tl.constexpr,
    RANK_PAD: tl.constexpr,
    REDUCE_IN_EXPAND: tl.constexpr,
    UNROLL: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """Shrink job ``within`` of token tile ``mt`` (jobs in (slice, part, K chunk) order): the
    float32 partial of ``x @ A[slot].T`` over one K chunk and ``R`` rank rows of a pair (rows
    from the adapter's real rank on are not read).

    Stores the partial and counts its arrival; with ``REDUCE_IN_EXPAND`` off, the job that
    arrives last among its part's K chunks sums that part's partials into the rank-sized
    intermediate and counts the part as ready.
    """
    per_slice: tl.constexpr = K_SPLIT * PARTS
    s = within // per_slice
    part = (within - s * per_slice) // K_SPLIT
    ks = within - s * per_slice - part * K_SPLIT
    pair = mt * NUM_SLICES + s
    r0 = part * R
    a_base = tl.where(s == 2, a2_ptr, tl.where(s == 1, a1_ptr, a0_ptr))
    a_base += slot * a_slot_stride + r0 * a_row_stride
    acc = _shrink_partial(
        x_ptr, a_base, tok64, m_mask, rank - r0, ks, k_dim, stride_xm, stride_xk, a_row_stride,
        K_ITERS, BLOCK_M, BLOCK_K, R, UNROLL, UPCAST_DOT,
    )  # fmt: skip
    offs = _rank_tile_offsets(r0, BLOCK_M, R, RANK_PAD)
    tl.store(part_ptr + (pair.to(tl.int64) * K_SPLIT + ks) * (BLOCK_M * RANK_PAD) + offs, acc)
    # All threads' stores before the (single-thread) release of the arrival. A pair's arrivals
    # are counted per part when the parts are reduced here, else all on the first counter.
    tl.debug_barrier()
    # When the expand jobs sum the partials, nothing here waits for the count: a release
    # suffices, and the program goes on to its next ticket while the add travels.
    if REDUCE_IN_EXPAND:
        tl.atomic_add(arrive_ptr + pair * WIDE_SPLIT, 1, sem="release")
    else:
        arrived = tl.atomic_add(arrive_ptr + pair * WIDE_SPLIT + part, 1, sem="acq_rel")
        if arrived == K_SPLIT - 1:
            tl.debug_barrier()
            summed = _sum_partials(part_ptr, pair, r0, K_SPLIT, BLOCK_M, R, RANK_PAD)
            tl.store(
                inter_ptr + pair.to(tl.int64) * (BLOCK_M * RANK_PAD) + offs,
                (summed * scale).to(inter_ptr.dtype.element_ty),
            )
            tl.debug_barrier()
            tl.atomic_add(ready_ptr + pair, 1, sem="release")


def _b_tile(  # type: ignore[no-untyped-def]
    b_base,
    r0,
    rank,
    col0,
    n_s,
    b_row_stride,
    BLOCK_N: tl.constexpr,
    R: tl.constexpr,
):
    """``B[slot]``'s tile: rank rows ``r0 .. r0 + R`` (all zero when ``r0`` is past ``rank``),
    slice columns ``col0 .. col0 + BLOCK_N``.

    Rows from ``rank`` on inside a chunk are read as stored (zero: vLLM zeroes a slot before it
    writes an adapter into it, ``reset_lora``; any finite value would do): the intermediate is
    exactly zero there. A mask that varied with the rank along B's contiguous axis would keep
    the loads from being vectorised; the bound on the stacked rank (the row stride) does not
    when that is a multiple of 16, as Triton then knows.
    """
    offs_n = col0 + tl.arange(0, BLOCK_N)
    rows = r0 + tl.arange(0, R)
    chunk_live = (tl.full((R,), 0, tl.int32) + r0) < rank  # the whole chunk, or none of it
    return tl.load(
        b_base + offs_n[None, :] * b_row_stride + rows[:, None],
        mask=(chunk_live & (rows < b_row_stride))[:, None] & (offs_n < n_s)[None, :],
        other=0.0,
    )


def _output_tile(  # type: ignore[no-untyped-def]
    y_ptr,
    b_base,
    tok64,
    m_mask,
    rank,
    col0,
    n_s,
    y_col,
    stride_ym,
    stride_yn,
    b_row_stride,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    R: tl.constexpr,
    ADD_INPUTS: tl.constexpr,
):
    """Operands of one expand output tile: slice columns ``col0 .. col0 + BLOCK_N``.

    Returns ``B[slot]``'s first rank chunk of the tile (rows ``0 .. R``) and ``y``'s values
    (zeros in write-only mode, where they are not added).
    """
    bt = _b_tile(b_base, 0, rank, col0, n_s, b_row_stride, BLOCK_N, R)
    if ADD_INPUTS:
        offs_n = col0 + tl.arange(0, BLOCK_N)
        y_old = tl.load(
            y_ptr + tok64[:, None] * stride_ym + (y_col + offs_n)[None, :] * stride_yn,
            mask=m_mask[:, None] & (offs_n < n_s)[None, :],
            other=0.0,
        )
    else:
        y_old = tl.full((BLOCK_M, BLOCK_N), 0.0, y_ptr.dtype.element_ty)
    return bt, y_old


def _store_output(  # type: ignore[no-untyped-def]
    y_ptr,
    out,
    tok64,
    m_mask,
    col0,
    n_s,
    y_col,
    stride_ym,
    stride_yn,
    BLOCK_N: tl.constexpr,
):
    """Store an expand output tile (slice columns ``col0 .. col0 + BLOCK_N``) into ``y``.

    The pointers are rebuilt here, in a different order of terms than for the load of ``y``, so
    the compiler does not keep the load's 64-bit pointer tensor alive across the wait for the
    shrink (at 512 columns that alone is 128 registers a thread, and it spilled).
    """
    cols = tl.arange(0, BLOCK_N)
    row_base = y_ptr + (y_col + col0) * stride_yn + tok64 * stride_ym
    tl.store(
        row_base[:, None] + (cols * stride_yn)[None, :],
        out.to(y_ptr.dtype.element_ty),
        mask=m_mask[:, None] & (col0 + cols < n_s)[None, :],
    )


def _expand_job(  # type: ignore[no-untyped-def]
    pair,
    local,
    slot,
    tok64,
    m_mask,
    rank,
    n_s,
    y_col,
    b_slice,
    y_ptr,
    part_ptr,
    inter_ptr,
    arrive_ptr,
    ready_ptr,
    stride_ym,
    stride_yn,
    b_row_stride,
    scale,
    K_SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    R: tl.constexpr,
    N_CHUNKS: tl.constexpr,
    PARTS: tl.constexpr,
    WIDE_SPLIT: tl.constexpr,
    RANK_PAD: tl.constexpr,
    N_GROUP: tl.constexpr,
    REDUCE_IN_EXPAND: tl.constexpr,
    ADD_INPUTS: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """One expand job: ``N_GROUP`` output tiles of ``y += inter @ B[slot]`` for group ``local``
    of a pair's slice, over ``N_CHUNKS`` rank chunks of ``R`` rows (the pair's shrink came in
    ``PARTS`` parts).

    The chunks are unrolled and unguarded (rows from the rank on are masked), and no store lies
    between them, so the compiler may issue their loads together."""
    b_base = b_slice + slot * n_s * b_row_stride
    span = BLOCK_N * N_GROUP
    # The first output tile's B and y do not depend on the shrink: load them first.
    bt, y_old = _output_tile(
        y_ptr, b_base, tok64, m_mask, rank, local * span, n_s, y_col, stride_ym, stride_yn,
        b_row_stride, BLOCK_M, BLOCK_N, R, ADD_INPUTS,
    )  # fmt: skip
    # Wait for the pair's shrink: all its jobs' arrivals, or each part's reducing job. Tickets
    # are handed out in order, so every shrink job is held by a running program by now: the
    # wait ends whatever the grid or the occupancy.
    if REDUCE_IN_EXPAND:
        flag_ptr = arrive_ptr + pair * WIDE_SPLIT
        want = K_SPLIT * PARTS
    else:
        flag_ptr = ready_ptr + pair
        want = PARTS
    seen = tl.atomic_add(flag_ptr, 0, sem="acquire")
    while seen < want:
        seen = tl.atomic_add(flag_ptr, 0, sem="acquire")
    tl.debug_barrier()
    inter = _intermediate(
        part_ptr, inter_ptr, pair, 0, scale, K_SPLIT, BLOCK_M, R, RANK_PAD, REDUCE_IN_EXPAND
    )
    for g in tl.static_range(N_GROUP):
        col0 = local * span + g * BLOCK_N
        if g > 0:
            bt, y_old = _output_tile(
                y_ptr, b_base, tok64, m_mask, rank, col0, n_s, y_col, stride_ym, stride_yn,
                b_row_stride, BLOCK_M, BLOCK_N, R, ADD_INPUTS,
            )  # fmt: skip
        out = _mma(inter, bt, UPCAST_DOT)
        for c in tl.static_range(1, N_CHUNKS):
            bt_c = _b_tile(b_base, c * R, rank, col0, n_s, b_row_stride, BLOCK_N, R)
            inter_c = _intermediate(
                part_ptr, inter_ptr, pair, c * R, scale, K_SPLIT, BLOCK_M, R, RANK_PAD,
                REDUCE_IN_EXPAND,
            )  # fmt: skip
            out += _mma(inter_c, bt_c, UPCAST_DOT)
        if ADD_INPUTS:
            out += y_old.to(tl.float32)
        _store_output(y_ptr, out, tok64, m_mask, col0, n_s, y_col, stride_ym, stride_yn, BLOCK_N)


def _job(  # type: ignore[no-untyped-def]
    is_shrink,
    within,
    mt,
    n0,
    n1,
    n2,
    slot,
    tok64,
    m_mask,
    rank,
    x_ptr,
    y_ptr,
    a0_ptr,
    a1_ptr,
    a2_ptr,
    b0_ptr,
    b1_ptr,
    b2_ptr,
    part_ptr,
    inter_ptr,
    arrive_ptr,
    ready_ptr,
    k_dim,
    stride_xm,
    stride_xk,
    stride_ym,
    stride_yn,
    a_slot_stride,
    a_row_stride,
    b_row_stride,
    y_col_offset,
    scale,
    NUM_SLICES: tl.constexpr,
    K_SPLIT: tl.constexpr,
    K_ITERS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_R: tl.constexpr,
    WIDE: tl.constexpr,
    PARTS: tl.constexpr,
    STEPS: tl.constexpr,
    WIDE_SPLIT: tl.constexpr,
    RANK_PAD: tl.constexpr,
    N_GROUP: tl.constexpr,
    REDUCE_IN_EXPAND: tl.constexpr,
    ADD_INPUTS: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """Job ``within`` of token tile ``mt``: a shrink job, or an expand job.

    Narrow (``WIDE`` off): ``BLOCK_R`` rank rows, ``BLOCK_N``-column expand tiles. Wide: all
    ``RANK_PAD`` rows, split ``PARTS`` ways (1 or ``WIDE_SPLIT``): a shrink job takes
    ``RANK_PAD / PARTS`` of them over ``STEPS`` steps per K iteration (see
    ``TileConfig.wide_k_steps``: unrolled at decode sizes, one at prefill sizes), an expand job
    ``BLOCK_N / PARTS`` columns in ``RANK_PAD / BLOCK_R`` rank chunks: steps no larger than the
    narrow ones (same registers). Arrivals are counted ``WIDE_SPLIT`` counters to a pair.
    """
    if is_shrink:
        _shrink_job(
            within, mt, slot, tok64, m_mask, rank, x_ptr, a0_ptr, a1_ptr, a2_ptr, part_ptr,
            inter_ptr, arrive_ptr, ready_ptr, k_dim, stride_xm, stride_xk, a_slot_stride,
            a_row_stride, scale, NUM_SLICES, K_SPLIT, K_ITERS * STEPS, BLOCK_M, BLOCK_K // STEPS,
            RANK_PAD // PARTS if WIDE else BLOCK_R, PARTS, WIDE_SPLIT, RANK_PAD,
            REDUCE_IN_EXPAND, STEPS > 1, UPCAST_DOT,
        )  # fmt: skip
    else:
        block_n: tl.constexpr = BLOCK_N // PARTS
        span: tl.constexpr = block_n * N_GROUP
        t0 = (n0 + span - 1) // span
        t1 = (n1 + span - 1) // span
        in1 = within >= t0
        in2 = within >= t0 + t1
        s = in1.to(tl.int32) + in2.to(tl.int32)
        n_s = tl.where(in2, n2, tl.where(in1, n1, n0))
        col_base = tl.where(in2, n0 + n1, tl.where(in1, n0, 0))
        local = within - tl.where(in2, t0 + t1, tl.where(in1, t0, 0))
        b_slice = tl.where(in2, b2_ptr, tl.where(in1, b1_ptr, b0_ptr))
        _expand_job(
            mt * NUM_SLICES + s, local, slot, tok64, m_mask, rank, n_s, y_col_offset + col_base,
            b_slice, y_ptr, part_ptr, inter_ptr, arrive_ptr, ready_ptr, stride_ym, stride_yn,
            b_row_stride, scale, K_SPLIT, BLOCK_M, block_n, BLOCK_R,
            RANK_PAD // BLOCK_R if WIDE else 1, PARTS, WIDE_SPLIT, RANK_PAD, N_GROUP,
            REDUCE_IN_EXPAND, ADD_INPUTS, UPCAST_DOT,
        )  # fmt: skip


def _zero_counters(ptr, count) -> None:  # type: ignore[no-untyped-def]
    """Set ``count`` int32 counters from ``ptr`` on to zero."""
    offs = tl.arange(0, 128)
    for c0 in range(0, count, 128):
        tl.store(ptr + c0 + offs, tl.full((128,), 0, tl.int32), mask=c0 + offs < count)


def _jobs_of_width(  # type: ignore[no-untyped-def]
    n0,
    n1,
    n2,
    NUM_SLICES: tl.constexpr,
    K_SPLIT: tl.constexpr,
    PARTS: tl.constexpr,
    SPAN: tl.constexpr,
):
    """Shrink and expand jobs of one token tile whose work is split ``PARTS`` ways, with
    expand groups of ``SPAN`` columns."""
    expand = (n0 + SPAN - 1) // SPAN + (n1 + SPAN - 1) // SPAN + (n2 + SPAN - 1) // SPAN
    return NUM_SLICES * K_SPLIT * PARTS, expand


def _split_if_fits(  # type: ignore[no-untyped-def]
    n0,
    n1,
    n2,
    n_wide,
    split_jobs,
    shrink_w,
    expand_w,
    parts,
    NUM_SLICES: tl.constexpr,
    K_SPLIT: tl.constexpr,
    PARTS: tl.constexpr,
    SPAN: tl.constexpr,
):
    """A wide tile's shrink jobs, expand jobs and parts when split ``PARTS`` ways (expand groups
    of ``SPAN`` columns), if all ``n_wide`` tiles' jobs then fit ``split_jobs``; else the given
    ones."""
    shrink_p, expand_p = _jobs_of_width(n0, n1, n2, NUM_SLICES, K_SPLIT, PARTS, SPAN)
    fits = n_wide * (shrink_p + expand_p) <= split_jobs
    return (
        tl.where(fits, shrink_p, shrink_w),
        tl.where(fits, expand_p, expand_w),
        tl.where(fits, PARTS, parts),
    )


def _fused_lora_kernel(  # type: ignore[no-untyped-def]
    x_ptr,
    y_ptr,
    a0_ptr,
    a1_ptr,
    a2_ptr,
    b0_ptr,
    b1_ptr,
    b2_ptr,
    tiles_ptr,
    part_ptr,
    inter_ptr,
    ctr_ptr,
    n0,
    n1,
    n2,
    m_rows,
    k_dim,
    stride_xm,
    stride_xk,
    stride_ym,
    stride_yn,
    a_slot_stride,
    a_row_stride,
    b_row_stride,
    y_col_offset,
    pair_cap,
    min_rank,
    split_jobs,
    scale,
    NUM_SLICES: tl.constexpr,
    K_SPLIT: tl.constexpr,
    K_ITERS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_R: tl.constexpr,
    RANK_PAD: tl.constexpr,
    WIDE_SPLIT: tl.constexpr,
    WIDE_K_STEPS: tl.constexpr,
    N_GROUP: tl.constexpr,
    REDUCE_IN_EXPAND: tl.constexpr,
    WIDE_REDUCE_IN_EXPAND: tl.constexpr,
    ADD_INPUTS: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    nprog = tl.num_programs(0)
    num_tiles = tl.load(tiles_ptr)
    # The wide tiles come first in the list (see .worklist); every tile is wide while the
    # ranks are stale (min_rank above the narrow width).
    if RANK_PAD > BLOCK_R:
        n_wide = tl.where(min_rank > BLOCK_R, num_tiles, tl.load(tiles_ptr + 1))
    else:
        n_wide = 0
    n_narrow = num_tiles - n_wide
    shrink_n, expand_n = _jobs_of_width(n0, n1, n2, NUM_SLICES, K_SPLIT, 1, BLOCK_N * N_GROUP)
    # Wide tiles' jobs are split into the most parts (WIDE_SPLIT, half of it, or whole) for
    # which all of them stay within split_jobs.
    shrink_w = shrink_n
    expand_w = expand_n
    parts = num_tiles * 0 + 1
    if WIDE_SPLIT >= 4:
        shrink_w, expand_w, parts = _split_if_fits(
            n0, n1, n2, n_wide, split_jobs, shrink_w, expand_w, parts, NUM_SLICES, K_SPLIT,
            WIDE_SPLIT // 2, BLOCK_N // (WIDE_SPLIT // 2) * N_GROUP,
        )  # fmt: skip
    if WIDE_SPLIT >= 2:
        shrink_w, expand_w, parts = _split_if_fits(
            n0, n1, n2, n_wide, split_jobs, shrink_w, expand_w, parts, NUM_SLICES, K_SPLIT,
            WIDE_SPLIT, BLOCK_N // WIDE_SPLIT * N_GROUP,
        )  # fmt: skip
    # Tickets in order: wide tiles' shrink jobs, narrow ones', wide tiles' expand jobs, narrow
    # ones'. Each region holds its tiles' jobs one tile after the other.
    end_shrink_w = n_wide * shrink_w
    n_shrink = end_shrink_w + n_narrow * shrink_n
    end_expand_w = n_shrink + n_wide * expand_w
    total = end_expand_w + n_narrow * expand_n
    n_pairs = num_tiles * NUM_SLICES
    ready_ptr = ctr_ptr + 2
    arrive_ptr = ctr_ptr + 2 + pair_cap
    # The grid is sized for the most jobs a step can have; programs beyond this step's job
    # count take no ticket (their atomics on the one counter would delay the others' tickets).
    # Tickets are relaxed: they order nothing but themselves (the partials are published by the
    # arrivals; for the counters' reset, see below).
    takers = tl.minimum(nprog, total)
    job = total + nprog  # (past every ticket: no job, no reset)
    if tl.program_id(0) < takers:
        job = tl.atomic_add(ctr_ptr, 1, sem="relaxed")
    while job < total:
        is_shrink = job < n_shrink
        wide = tl.where(is_shrink, job < end_shrink_w, job < end_expand_w)
        first = tl.where(
            is_shrink, tl.where(wide, 0, end_shrink_w), tl.where(wide, n_shrink, end_expand_w)
        )
        per_tile = tl.where(
            is_shrink, tl.where(wide, shrink_w, shrink_n), tl.where(wide, expand_w, expand_n)
        )
        tile = (job - first) // per_tile
        within = job - first - tile * per_tile
        mt = tl.where(wide, tile, n_wide + tile)
        slot, tok64, m_mask, rank = _tile_record(tiles_ptr, mt, m_rows, min_rank, BLOCK_M)
        # A tile's adapter is taken at the narrow width (BLOCK_R rank rows) when its rank fits,
        # else at the whole padded rank, its jobs in `parts` parts (see _job): a rank-16 adapter
        # costs the same under any max_lora_rank. (Wide tiles exist only when RANK_PAD exceeds
        # BLOCK_R; the constexpr guards keep the paths a variant cannot take out of its code.)
        if wide & (parts > 1) & (parts == WIDE_SPLIT):
            if WIDE_SPLIT > 1:
                _job(
                    is_shrink, within, mt, n0, n1, n2, slot, tok64, m_mask, rank, x_ptr, y_ptr,
                    a0_ptr, a1_ptr, a2_ptr, b0_ptr, b1_ptr, b2_ptr, part_ptr, inter_ptr,
                    arrive_ptr, ready_ptr, k_dim, stride_xm, stride_xk, stride_ym, stride_yn,
                    a_slot_stride, a_row_stride, b_row_stride, y_col_offset, scale, NUM_SLICES,
                    K_SPLIT, K_ITERS, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_R, True, WIDE_SPLIT,
                    WIDE_K_STEPS // WIDE_SPLIT, WIDE_SPLIT, RANK_PAD, N_GROUP,
                    WIDE_REDUCE_IN_EXPAND, ADD_INPUTS, UPCAST_DOT,
                )  # fmt: skip
        elif wide & (parts > 1):
            if WIDE_SPLIT >= 4:
                _job(
                    is_shrink, within, mt, n0, n1, n2, slot, tok64, m_mask, rank, x_ptr, y_ptr,
                    a0_ptr, a1_ptr, a2_ptr, b0_ptr, b1_ptr, b2_ptr, part_ptr, inter_ptr,
                    arrive_ptr, ready_ptr, k_dim, stride_xm, stride_xk, stride_ym, stride_yn,
                    a_slot_stride, a_row_stride, b_row_stride, y_col_offset, scale, NUM_SLICES,
                    K_SPLIT, K_ITERS, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_R, True, WIDE_SPLIT // 2,
                    WIDE_K_STEPS // (WIDE_SPLIT // 2), WIDE_SPLIT, RANK_PAD, N_GROUP,
                    WIDE_REDUCE_IN_EXPAND, ADD_INPUTS, UPCAST_DOT,
                )  # fmt: skip
        elif wide:
            if RANK_PAD > BLOCK_R:
                _job(
                    is_shrink, within, mt, n0, n1, n2, slot, tok64, m_mask, rank, x_ptr, y_ptr,
                    a0_ptr, a1_ptr, a2_ptr, b0_ptr, b1_ptr, b2_ptr, part_ptr, inter_ptr,
                    arrive_ptr, ready_ptr, k_dim, stride_xm, stride_xk, stride_ym, stride_yn,
                    a_slot_stride, a_row_stride, b_row_stride, y_col_offset, scale, NUM_SLICES,
                    K_SPLIT, K_ITERS, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_R, True, 1, WIDE_K_STEPS,
                    WIDE_SPLIT, RANK_PAD, N_GROUP, WIDE_REDUCE_IN_EXPAND, ADD_INPUTS, UPCAST_DOT,
                )  # fmt: skip
        else:
            _job(
                is_shrink, within, mt, n0, n1, n2, slot, tok64, m_mask, rank, x_ptr, y_ptr,
                a0_ptr, a1_ptr, a2_ptr, b0_ptr, b1_ptr, b2_ptr, part_ptr, inter_ptr,
                arrive_ptr, ready_ptr, k_dim, stride_xm, stride_xk, stride_ym, stride_yn,
                a_slot_stride, a_row_stride, b_row_stride, y_col_offset, scale, NUM_SLICES,
                K_SPLIT, K_ITERS, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_R, False, 1, 1, WIDE_SPLIT,
                RANK_PAD, N_GROUP, REDUCE_IN_EXPAND, ADD_INPUTS, UPCAST_DOT,
            )  # fmt: skip
        job = tl.atomic_add(ctr_ptr, 1, sem="relaxed")
    # Every taker takes exactly one ticket past the last job, after all of its own jobs, so the
    # holder of the very last ticket knows every job is done: it resets the counters. No
    # counter is touched after that: every arrival and ready count was seen by an expand job's
    # acquiring wait, which came before that program's later tickets.
    if job == total + takers - 1:
        _zero_counters(ready_ptr, n_pairs)
        _zero_counters(arrive_ptr, n_pairs * WIDE_SPLIT)
        tl.atomic_xchg(ctr_ptr, 0)


#: Device functions the kernel calls, in the order they must be wrapped (callees first).
_DEVICE_FUNCTIONS = (
    _tile_record,
    _mma,
    _rank_tile_offsets,
    _sum_partials,
    _intermediate,
    _shrink_step,
    _shrink_partial,
    _shrink_job,
    _b_tile,
    _output_tile,
    _store_output,
    _expand_job,
    _job,
    _zero_counters,
    _jobs_of_width,
    _split_if_fits,
)


def _flavour(wrap: Callable[[Callable[..., Any]], Any]) -> Callable[..., Any]:
    """The kernel function with its device functions wrapped by ``wrap`` (JIT or interpreter).

    The kernel resolves its callees through its globals, and a compiled kernel needs JIT
    functions there while the interpreter needs interpreted ones, so each flavour gets its own
    copy of the module's globals (the source, and so the compiled code, is shared).
    """
    scope = dict(globals())
    for fn in _DEVICE_FUNCTIONS:
        scope[fn.__name__] = wrap(_with_globals(fn, scope))
    return _with_globals(_fused_lora_kernel, scope)


def _with_globals(fn: Callable[..., Any], scope: dict[str, Any]) -> Callable[..., Any]:
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    # The annotations are not part of the code object, and Triton finds the constexpr
    # parameters through them.
    copy.__annotations__ = dict(fn.__annotations__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    copy.__doc__ = fn.__doc__
    return copy


#: Arguments whose values change between calls of one layer: not specialised, so that they do
#: not multiply compiled variants.
_VARYING_ARGS = ("m_rows", "pair_cap", "min_rank", "split_jobs")


@functools.cache
def _compiled_kernel() -> Any:
    return triton.jit(do_not_specialize=list(_VARYING_ARGS))(_flavour(triton.jit))


@functools.cache
def _interpreted_kernel() -> Any:
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(_flavour(InterpretedFunction))


def compile_for_target(
    num_slices: int,
    cfg: TileConfig,
    reduce_in_expand: bool,
    arch: int = 90,
    dtype: str = "bf16",
    add_inputs: bool = True,
    k_split: int = 4,
    wide_reduce_in_expand: bool | None = None,
) -> Any:
    """Compile the kernel ahead of time for CUDA ``sm_<arch>`` (no GPU needed; tests, tuning).
    Wide tiles take ``reduce_in_expand`` too unless ``wide_reduce_in_expand`` says otherwise.

    The variant is specialised as Triton specialises a serving launch: ``x`` and ``y`` have unit
    column strides (constants), pointers are 16-byte aligned and the sizes and strides are
    multiples of 16 (as in every Llama-shaped layer), which is what lets the loads be vectorised.
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = _compiled_kernel()
    constexprs: dict[str, Any] = {
        "NUM_SLICES": num_slices,
        "K_SPLIT": k_split,
        "K_ITERS": cfg.k_iters,
        "BLOCK_M": cfg.block_m,
        "BLOCK_N": cfg.block_n,
        "BLOCK_K": cfg.block_k,
        "BLOCK_R": cfg.block_r,
        "RANK_PAD": cfg.rank_pad,
        "WIDE_SPLIT": cfg.wide_split,
        "N_GROUP": cfg.n_group,
        "WIDE_K_STEPS": cfg.wide_k_steps,
        "REDUCE_IN_EXPAND": reduce_in_expand,
        "WIDE_REDUCE_IN_EXPAND": (
            reduce_in_expand if wide_reduce_in_expand is None else wide_reduce_in_expand
        ),
        "ADD_INPUTS": add_inputs,
        "UPCAST_DOT": False,
    }
    declared = {param.name for param in kernel.params if param.is_constexpr}
    if declared != set(constexprs):
        raise KernelCompileError(f"constexpr parameters {sorted(declared)} != {sorted(constexprs)}")
    constexprs |= {"stride_xk": 1, "stride_yn": 1}
    pointers = {"tiles_ptr": "*i32", "ctr_ptr": "*i32", "part_ptr": "*fp32"}
    names: list[str] = kernel.arg_names
    signature = {
        name: "constexpr"
        if name in constexprs
        else pointers.get(name, f"*{dtype}")
        if name.endswith("_ptr")
        else "fp32"
        if name == "scale"
        else "i32"
        for name in names
    }
    aligned = [
        name
        for name in names
        if name not in constexprs and name not in _VARYING_ARGS and name != "scale"
    ]
    source = ASTSource(
        kernel,
        signature,
        constexprs={(names.index(name),): value for name, value in constexprs.items()},
        attrs={(names.index(name),): [["tt.divisibility", 16]] for name in aligned},
    )
    options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


@functools.cache
def _num_sms(device_index: int) -> int:
    return int(torch.cuda.get_device_properties(device_index).multi_processor_count)


def _check_layout(
    x: torch.Tensor, y: torch.Tensor, a: list[torch.Tensor], b: list[torch.Tensor]
) -> None:
    if not 1 <= len(a) <= MAX_SLICES or len(a) != len(b):
        raise FusedLoRAShapeError(f"need 1..{MAX_SLICES} slices with A and B, got {len(a)}")
    if x.dim() != 2 or y.dim() != 2:
        raise FusedLoRAShapeError("x and y must be 2-D (tokens, features)")
    if x.shape[0] != y.shape[0]:
        raise FusedLoRAShapeError(f"x has {x.shape[0]} rows, y has {y.shape[0]}")
    first = a[0]
    for a_s, b_s in zip(a, b, strict=True):
        if a_s.shape != first.shape or a_s.dtype != first.dtype or b_s.dtype != first.dtype:
            raise FusedLoRAShapeError("all slices' A must share shape and dtype with B")
        if not (a_s.is_contiguous() and b_s.is_contiguous()):
            raise FusedLoRAShapeError("stacked LoRA weights must be contiguous")
        if b_s.shape[0] != a_s.shape[0] or b_s.shape[2] != a_s.shape[1]:
            raise FusedLoRAShapeError(
                f"B {tuple(b_s.shape)} does not match A {tuple(a_s.shape)} (slots, rank)"
            )
    if first.shape[2] != x.shape[1]:
        raise FusedLoRAShapeError(f"A takes {first.shape[2]} inputs, x has {x.shape[1]}")


def launch_fused_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    lora_b: Sequence[torch.Tensor],
    tiles_by_block_m: dict[int, torch.Tensor],
    counters: torch.Tensor,
    scale: float,
    offset_start: int = 0,
    add_inputs: bool = True,
    config: TileConfig | None = None,
    max_programs: int | None = None,
    min_rank: int = 0,
    reduce_in_expand: bool | None = None,
    wide_reduce_in_expand: bool | None = None,
    wide_split_jobs: int | None = None,
) -> TileConfig:
    """Launch the kernel once for all slices; returns the tile configuration it used.

    ``counters`` is the zeroed int32 buffer of :class:`.worklist.WorkListBuffers` (left zeroed).
    Every adapter runs at least at ``min_rank`` (the full rank while ranks are stale).
    ``reduce_in_expand`` and ``wide_reduce_in_expand`` override the choice of reduction for
    narrow and wide tiles, ``wide_split_jobs`` the most jobs for which wide tiles are split
    (default: :data:`.config.WIDE_SPLIT_WAVES` waves of the launch's programs; tests and tuning).
    On a GPU, the first call for a layer shape also compiles the prefill-sized variants it has
    not met yet (see :func:`precompile_prefill_variants`).
    """
    a = [stacked_view(t) for t in lora_a]
    b = [stacked_view(t) for t in lora_b]
    _check_layout(x, y, a, b)
    widths = [t.shape[1] for t in b]
    if offset_start + sum(widths) > y.shape[1]:
        raise FusedLoRAShapeError(f"slices end at {offset_start + sum(widths)} > {y.shape[1]}")
    if x.is_cuda and config is None:
        precompile_prefill_variants(y, x, a, b, tiles_by_block_m, counters, add_inputs)
    return _launch(
        y, x, a, b, tiles_by_block_m, counters, scale, offset_start, add_inputs, config,
        max_programs, min_rank, (reduce_in_expand, wide_reduce_in_expand), wide_split_jobs,
        x.shape[0], compile_only=False,
    )  # fmt: skip


#: Layers (by weights' address and layout) whose prefill-sized variants are compiled.
_PRECOMPILED: set[tuple[object, ...]] = set()


def precompile_prefill_variants(
    y: torch.Tensor,
    x: torch.Tensor,
    a: list[torch.Tensor],
    b: list[torch.Tensor],
    tiles_by_block_m: dict[int, torch.Tensor],
    counters: torch.Tensor,
    add_inputs: bool,
) -> int:
    """Compile, without running, the kernel for every prefill token bucket of this layer.

    vLLM compiles what its start-up meets: the profile run (the largest batch) and the CUDA
    graph sizes. A prefill chunk of another bucket would otherwise compile its variant in the
    middle of serving (seconds, every request of the step waiting). Checked once per layer,
    keyed by its weights' address and layout (the caching allocator hands a freed address to
    new weights, possibly of another shape); layers of one shape and specialisation share the
    compiled variants, so only the first of them compiles. Returns the number of variants
    compiled now.
    """
    key = _layer_key(x, a, b, add_inputs)
    if key in _PRECOMPILED:
        return 0
    _PRECOMPILED.add(key)
    variants = _variant_cache(_compiled_kernel())
    before = len(variants) if variants is not None else 0
    began = time.perf_counter()
    for bucket in PREFILL_BUCKETS:
        _launch(
            y, x, a, b, tiles_by_block_m, counters, 1.0, 0, add_inputs, None, None, 0,
            (None, None), None, bucket, compile_only=True,
        )  # fmt: skip
    compiled = len(variants) - before if variants is not None else len(PREFILL_BUCKETS)
    if compiled:
        logger.info(
            "fused LoRA kernel: %d prefill variants for K=%d N=%s compiled in %.1f s",
            compiled,
            x.shape[1],
            [t.shape[1] for t in b],
            time.perf_counter() - began,
        )
    return compiled


def _layer_key(
    x: torch.Tensor, a: list[torch.Tensor], b: list[torch.Tensor], add_inputs: bool
) -> tuple[object, ...]:
    """What identifies a layer's launches for the precompile: its weights' address and layout
    (an address alone is reused by the caching allocator for weights of another shape)."""
    return (
        x.device.index or 0,
        a[0].data_ptr(),
        a[0].shape,
        a[0].dtype,
        tuple(t.shape[1] for t in b),
        add_inputs,
    )


def _variant_cache(kernel: Any) -> dict[str, Any] | None:
    """Triton's compiled variants of ``kernel`` for the current device, by key (None if the
    Triton version keeps them elsewhere)."""
    caches = getattr(kernel, "device_caches", None)
    if caches is None:
        return None
    cache: dict[str, Any] = caches[torch.cuda.current_device()][0]
    return cache


def _launch(
    y: torch.Tensor,
    x: torch.Tensor,
    a: list[torch.Tensor],
    b: list[torch.Tensor],
    tiles_by_block_m: dict[int, torch.Tensor],
    counters: torch.Tensor,
    scale: float,
    offset_start: int,
    add_inputs: bool,
    config: TileConfig | None,
    max_programs: int | None,
    min_rank: int,
    reductions: tuple[bool | None, bool | None],
    split_jobs: int | None,
    m: int,
    *,
    compile_only: bool,
) -> TileConfig:
    """Launch (or, with ``compile_only``, only compile) the kernel configured for ``m`` rows.

    ``reductions``: whether narrow and wide tiles reduce in the expand jobs; ``split_jobs``:
    the most jobs for which wide tiles are split (None: the defaults)."""
    widths = [t.shape[1] for t in b]
    on_gpu = x.is_cuda
    num_sms = _num_sms(x.device.index or 0) if on_gpu else 4
    n_slots = a[0].shape[0]
    cfg = config or choose_config(m, x.shape[1], sum(widths), a[0].shape[1], num_sms, n_slots)
    tiles = tiles_by_block_m[cfg.block_m]
    k_split = cfg.k_split(x.shape[1])
    if cfg.rank_pad < a[0].shape[1]:
        raise FusedLoRAShapeError(f"padded rank {cfg.rank_pad} < stacked rank {a[0].shape[1]}")
    try:
        cfg.check()
    except KernelConfigError as exc:
        raise FusedLoRAShapeError(str(exc)) from exc
    tiles_ub = min(
        upper_bound_tiles(x.shape[0], n_slots, cfg.block_m),
        (tiles.numel() - HEADER_SIZE) // record_size(cfg.block_m),
    )
    pair_cap = pairs_in_counters(counters.numel())
    if tiles_ub * len(a) > pair_cap:
        raise FusedLoRAShapeError(f"{tiles_ub * len(a)} tile pairs > counter capacity {pair_cap}")
    # Most jobs: every tile wide when there is a wide path (a wide tile has the most jobs).
    wide = cfg.rank_pad > cfg.block_r
    jobs_per_tile = len(a) * k_split * (cfg.wide_split if wide else 1)
    jobs_ub = tiles_ub * (jobs_per_tile + cfg.expand_jobs(widths, wide=wide))
    cap = max_programs if max_programs is not None else (num_sms * PROGRAMS_PER_SM)
    grid = (max(1, min(jobs_ub, cap)),)
    if split_jobs is None:
        split_jobs = WIDE_SPLIT_WAVES * grid[0]
    tile_elems = cfg.block_m * cfg.rank_pad
    reduce_narrow = reductions[0]
    if reduce_narrow is None:
        reduce_narrow = cfg.reduces_in_expand(x.shape[1], widths)
    reduce_wide = reductions[1]
    if reduce_wide is None:
        reduce_wide = cfg.reduces_in_expand(x.shape[1], widths, wide=True)
    part = torch.empty(
        tiles_ub * len(a) * k_split * tile_elems, dtype=torch.float32, device=x.device
    )
    inter = torch.empty(tiles_ub * len(a) * tile_elems, dtype=a[0].dtype, device=x.device)
    # One pointer per slice (absent slices repeat the first): offsets between the slices'
    # tensors would be typed i32 or i64 by their value, and so multiply compiled variants.
    a_slices = [*a, a[0], a[0]][:MAX_SLICES]
    b_slices = [*b, b[0], b[0]][:MAX_SLICES]
    ns = [*widths, 0, 0]
    kernel = _compiled_kernel() if on_gpu else _interpreted_kernel()
    variants = _variant_cache(kernel) if on_gpu else None
    known = len(variants) if variants is not None and not compile_only else None
    run = functools.partial(kernel.warmup, grid=grid) if compile_only else kernel[grid]
    run(
        x,
        y,
        *a_slices,
        *b_slices,
        tiles,
        part,
        inter,
        counters,
        ns[0],
        ns[1],
        ns[2],
        x.shape[0],
        x.shape[1],
        x.stride(0),
        x.stride(1),
        y.stride(0),
        y.stride(1),
        a[0].stride(0),
        a[0].stride(1),
        b[0].stride(1),
        offset_start,
        pair_cap,
        int(min_rank),
        int(split_jobs),
        float(scale),
        NUM_SLICES=len(a),
        K_SPLIT=k_split,
        K_ITERS=cfg.k_iters,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        BLOCK_R=cfg.block_r,
        RANK_PAD=cfg.rank_pad,
        WIDE_SPLIT=cfg.wide_split,
        N_GROUP=cfg.n_group,
        WIDE_K_STEPS=cfg.wide_k_steps,
        REDUCE_IN_EXPAND=bool(reduce_narrow),
        WIDE_REDUCE_IN_EXPAND=bool(reduce_wide),
        ADD_INPUTS=add_inputs,
        UPCAST_DOT=not on_gpu and a[0].dtype == torch.bfloat16,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    if known is not None and variants is not None and len(variants) > known:
        # Expected while vLLM captures its CUDA graphs; during serving it names the variant
        # behind a JIT stall (vLLM's own monitor names only the kernel).
        logger.info(
            "fused LoRA kernel compiled for M=%d K=%d N=%s with %s: %s",
            x.shape[0],
            x.shape[1],
            widths,
            cfg,
            list(variants)[known:],  # (a dict keeps its insertion order)
        )
    return cfg
