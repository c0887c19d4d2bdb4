"""The fused kernel's shrink jobs: ``x @ A[slot].T`` over one K chunk of a (tile, slice) pair,
stored as float32 partials whose arrival the expand jobs wait for."""

from __future__ import annotations

import triton.language as tl

from .scratch import mma, rank_tile_offsets, sum_partials


def shrink_step(  # type: ignore[no-untyped-def]
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
    return mma(xt, at, UPCAST_DOT)


def shrink_partial(  # type: ignore[no-untyped-def]
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
            acc += shrink_step(
                x_ptr, a_base, tok64, m_mask, rank, offs_kb + it * BLOCK_K, k_dim, stride_xm,
                stride_xk, a_row_stride, R, UPCAST_DOT,
            )  # fmt: skip
    else:
        for it in range(K_ITERS):
            acc += shrink_step(
                x_ptr, a_base, tok64, m_mask, rank, offs_kb + it * BLOCK_K, k_dim, stride_xm,
                stride_xk, a_row_stride, R, UPCAST_DOT,
            )  # fmt: skip
    return acc


def shrink_job(  # type: ignore[no-untyped-def]
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
    acc = shrink_partial(
        x_ptr, a_base, tok64, m_mask, rank - r0, ks, k_dim, stride_xm, stride_xk, a_row_stride,
        K_ITERS, BLOCK_M, BLOCK_K, R, UNROLL, UPCAST_DOT,
    )  # fmt: skip
    offs = rank_tile_offsets(r0, BLOCK_M, R, RANK_PAD)
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
            summed = sum_partials(part_ptr, pair, r0, K_SPLIT, BLOCK_M, R, RANK_PAD)
            tl.store(
                inter_ptr + pair.to(tl.int64) * (BLOCK_M * RANK_PAD) + offs,
                (summed * scale).to(inter_ptr.dtype.element_ty),
            )
            tl.debug_barrier()
            tl.atomic_add(ready_ptr + pair, 1, sem="release")
