"""The fused kernel's solo launches (decode sizes): expand jobs only, none waiting for another.

Every expand job computes its token tile's intermediate itself (:func:`.shrink.solo_shrink`)
instead of waiting for shrink jobs' partials, so a program's chain is its tile record, then the
loads of ``x``, A, B and ``y`` side by side, then its store: no tickets, no partials, no arrival
counts, no counters to reset. Jobs are assigned by program id (job ``pid``, ``pid + programs``,
...), which needs no synchronisation since no job depends on another. The price is reading the
tile's rows of ``x`` and A once per expand job: solo jobs cover more columns than split ones
(:func:`hi_moe_lora.kernels.config.choose_config`). Wide tiles (rank above ``BLOCK_R``) take
the whole padded rank in one pass; narrow ones ``BLOCK_R`` rows and B's narrow copies.
"""

from __future__ import annotations

import triton.language as tl

from .expand import expand_job
from .records import jobs_of_width, tile_record


def solo_job(  # type: ignore[no-untyped-def]
    within,
    slot,
    tok64,
    m_mask,
    rank,
    n0,
    n1,
    n2,
    x_ptr,
    y_ptr,
    a0_ptr,
    a1_ptr,
    a2_ptr,
    b0_ptr,
    b1_ptr,
    b2_ptr,
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
    dora_ptr,
    dora_on_ptr,
    dora_stride,
    K_SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    R: tl.constexpr,
    RANK_PAD: tl.constexpr,
    N_GROUP: tl.constexpr,
    ADD_INPUTS: tl.constexpr,
    DORA: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """Expand job ``within`` of a tile (jobs in slice order, ``BLOCK_N * N_GROUP`` columns
    each), at ``R`` rank rows."""
    span: tl.constexpr = BLOCK_N * N_GROUP
    t0 = (n0 + span - 1) // span
    t1 = (n1 + span - 1) // span
    in1 = within >= t0
    in2 = within >= t0 + t1
    n_s = tl.where(in2, n2, tl.where(in1, n1, n0))
    col_base = tl.where(in2, n0 + n1, tl.where(in1, n0, 0))
    local = within - tl.where(in2, t0 + t1, tl.where(in1, t0, 0))
    b_slice = tl.where(in2, b2_ptr, tl.where(in1, b1_ptr, b0_ptr))
    a_base = tl.where(in2, a2_ptr, tl.where(in1, a1_ptr, a0_ptr)) + slot * a_slot_stride
    # (The split kernel's scratch and counters are not touched: their arguments are
    # placeholders the SOLO branch compiles out.)
    expand_job(
        0, local, slot, tok64, m_mask, rank, n_s, y_col_offset + col_base, b_slice, y_ptr,
        dora_on_ptr, a_base, dora_on_ptr, dora_on_ptr, stride_ym, stride_yn, b_row_stride, scale,
        dora_ptr, dora_on_ptr, dora_stride, col_base, x_ptr, a_base, k_dim, stride_xm, stride_xk,
        a_row_stride, K_SPLIT, BLOCK_M, BLOCK_N, R, 1, 1, 1, RANK_PAD, N_GROUP, True, ADD_INPUTS,
        DORA, UPCAST_DOT, True, BLOCK_K,
    )  # fmt: skip


def solo_loop(  # type: ignore[no-untyped-def]
    x_ptr,
    y_ptr,
    a0_ptr,
    a1_ptr,
    a2_ptr,
    b0_ptr,
    b1_ptr,
    b2_ptr,
    nb0_ptr,
    nb1_ptr,
    nb2_ptr,
    tiles_ptr,
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
    nb_row_stride,
    y_col_offset,
    min_rank,
    scale,
    dora_ptr,
    dora_on_ptr,
    dora_stride,
    NUM_SLICES: tl.constexpr,
    K_SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_R: tl.constexpr,
    RANK_PAD: tl.constexpr,
    N_GROUP: tl.constexpr,
    ADD_INPUTS: tl.constexpr,
    DORA: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """Run this program's share of the step's expand jobs (every ``num_programs``-th one)."""
    num_tiles = tl.load(tiles_ptr)
    # Wide tiles come first in the list (see .worklist); every tile is wide while the ranks
    # are stale (min_rank above the narrow width).
    if RANK_PAD > BLOCK_R:
        n_wide = tl.where(min_rank > BLOCK_R, num_tiles, tl.load(tiles_ptr + 1))
    else:
        n_wide = 0
    _, per_tile = jobs_of_width(n0, n1, n2, NUM_SLICES, K_SPLIT, 1, BLOCK_N * N_GROUP)
    total = num_tiles * per_tile
    job = tl.program_id(0)
    while job < total:
        mt = job // per_tile
        within = job - mt * per_tile
        slot, tok64, m_mask, rank = tile_record(tiles_ptr, mt, m_rows, min_rank, BLOCK_M)
        if mt < n_wide:
            if RANK_PAD > BLOCK_R:
                solo_job(
                    within, slot, tok64, m_mask, rank, n0, n1, n2, x_ptr, y_ptr, a0_ptr, a1_ptr,
                    a2_ptr, b0_ptr, b1_ptr, b2_ptr, k_dim, stride_xm, stride_xk, stride_ym,
                    stride_yn, a_slot_stride, a_row_stride, b_row_stride, y_col_offset, scale,
                    dora_ptr, dora_on_ptr, dora_stride, K_SPLIT, BLOCK_M, BLOCK_N, BLOCK_K,
                    RANK_PAD, RANK_PAD, N_GROUP, ADD_INPUTS, DORA, UPCAST_DOT,
                )  # fmt: skip
        else:
            # Narrow tiles read B's narrow copies (nb*; B itself when the launcher has none).
            solo_job(
                within, slot, tok64, m_mask, rank, n0, n1, n2, x_ptr, y_ptr, a0_ptr, a1_ptr,
                a2_ptr, nb0_ptr, nb1_ptr, nb2_ptr, k_dim, stride_xm, stride_xk, stride_ym,
                stride_yn, a_slot_stride, a_row_stride, nb_row_stride, y_col_offset, scale,
                dora_ptr, dora_on_ptr, dora_stride, K_SPLIT, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_R,
                RANK_PAD, N_GROUP, ADD_INPUTS, DORA, UPCAST_DOT,
            )  # fmt: skip
        job += tl.num_programs(0)
