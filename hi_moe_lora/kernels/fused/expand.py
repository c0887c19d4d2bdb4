"""The fused kernel's expand jobs: wait for a pair's shrink, sum its partials in a fixed order,
scale, round and add ``inter @ B[slot]`` into ``y``, one group of output tiles per job."""

from __future__ import annotations

import triton.language as tl

from .scratch import intermediate, mma


def b_tile(  # type: ignore[no-untyped-def]
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


def output_tile(  # type: ignore[no-untyped-def]
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
    bt = b_tile(b_base, 0, rank, col0, n_s, b_row_stride, BLOCK_N, R)
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


def store_output(  # type: ignore[no-untyped-def]
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


def expand_job(  # type: ignore[no-untyped-def]
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
    dora_ptr,
    dora_on_ptr,
    dora_stride,
    dora_col,
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
    DORA: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """One expand job: ``N_GROUP`` output tiles of ``y += inter @ B[slot]`` for group ``local``
    of a pair's slice, over ``N_CHUNKS`` rank chunks of ``R`` rows (the pair's shrink came in
    ``PARTS`` parts).

    The chunks are unrolled and unguarded (rows from the rank on are masked), and no store lies
    between them, so the compiler may issue their loads together.

    ``DORA``: the epilogue of a DoRA adapter, ``y = g * (y + inter @ B[slot])``, where the
    slot's DoRA flag (``dora_on_ptr``) is set; ``g`` is the slot's row of the layer's scale
    table (``dora_ptr``, ``dora_stride`` columns a row, this slice's from ``dora_col``). Other
    slots load nothing and multiply by one (exact)."""
    b_base = b_slice + slot * n_s * b_row_stride
    if DORA:
        dora_on = tl.load(dora_on_ptr + slot)
        dora_row = dora_ptr + slot * dora_stride + dora_col
    span = BLOCK_N * N_GROUP
    # The first output tile's B and y do not depend on the shrink: load them first.
    bt, y_old = output_tile(
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
    inter = intermediate(
        part_ptr, inter_ptr, pair, 0, scale, K_SPLIT, BLOCK_M, R, RANK_PAD, REDUCE_IN_EXPAND
    )
    for g in tl.static_range(N_GROUP):
        col0 = local * span + g * BLOCK_N
        if g > 0:
            bt, y_old = output_tile(
                y_ptr, b_base, tok64, m_mask, rank, col0, n_s, y_col, stride_ym, stride_yn,
                b_row_stride, BLOCK_M, BLOCK_N, R, ADD_INPUTS,
            )  # fmt: skip
        out = mma(inter, bt, UPCAST_DOT)
        for c in tl.static_range(1, N_CHUNKS):
            bt_c = b_tile(b_base, c * R, rank, col0, n_s, b_row_stride, BLOCK_N, R)
            inter_c = intermediate(
                part_ptr, inter_ptr, pair, c * R, scale, K_SPLIT, BLOCK_M, R, RANK_PAD,
                REDUCE_IN_EXPAND,
            )  # fmt: skip
            out += mma(inter_c, bt_c, UPCAST_DOT)
        if ADD_INPUTS:
            out += y_old.to(tl.float32)
        if DORA:
            offs_n = col0 + tl.arange(0, BLOCK_N)
            live = (tl.full((BLOCK_N,), 0, tl.int32) + dora_on) != 0  # the flag, per column
            g = tl.load(dora_row + offs_n, mask=(offs_n < n_s) & live, other=1.0)
            out = out * g[None, :]
        store_output(y_ptr, out, tok64, m_mask, col0, n_s, y_col, stride_ym, stride_yn, BLOCK_N)
