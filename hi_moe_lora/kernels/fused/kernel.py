"""The fused kernel's body: programs take tickets in order and run the job each one names.

See :mod:`hi_moe_lora.kernels.fused` for the design; the jobs are in :mod:`.shrink` and
:mod:`.expand`, the tile records and job counts in :mod:`.records`.
"""

from __future__ import annotations

import triton.language as tl

from .expand import expand_job
from .records import jobs_of_width, split_if_fits, tile_record, zero_counters
from .shrink import shrink_job


def run_job(  # type: ignore[no-untyped-def]
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
    dora_ptr,
    dora_on_ptr,
    dora_stride,
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
    DORA: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """Job ``within`` of token tile ``mt``: a shrink job, or an expand job.

    Narrow (``WIDE`` off): ``BLOCK_R`` rank rows, ``BLOCK_N``-column expand tiles. Wide: all
    ``RANK_PAD`` rows, split ``PARTS`` ways (1 or ``WIDE_SPLIT``): a shrink job takes
    ``RANK_PAD / PARTS`` of them over ``STEPS`` steps per K iteration (see
    ``TileConfig.wide_k_steps``: unrolled at one K iteration, else looped), an expand job
    ``BLOCK_N / PARTS`` columns in ``RANK_PAD / BLOCK_R`` rank chunks: steps no larger than the
    narrow ones (same registers). Arrivals are counted ``WIDE_SPLIT`` counters to a pair.
    """
    if is_shrink:
        shrink_job(
            within, mt, slot, tok64, m_mask, rank, x_ptr, a0_ptr, a1_ptr, a2_ptr, part_ptr,
            inter_ptr, arrive_ptr, ready_ptr, k_dim, stride_xm, stride_xk, a_slot_stride,
            a_row_stride, scale, NUM_SLICES, K_SPLIT, K_ITERS * STEPS, BLOCK_M, BLOCK_K // STEPS,
            RANK_PAD // PARTS if WIDE else BLOCK_R, PARTS, WIDE_SPLIT, RANK_PAD,
            REDUCE_IN_EXPAND, STEPS > 1 if K_ITERS == 1 else False, UPCAST_DOT,
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
        expand_job(
            mt * NUM_SLICES + s, local, slot, tok64, m_mask, rank, n_s, y_col_offset + col_base,
            b_slice, y_ptr, part_ptr, inter_ptr, arrive_ptr, ready_ptr, stride_ym, stride_yn,
            b_row_stride, scale, dora_ptr, dora_on_ptr, dora_stride, col_base, K_SPLIT, BLOCK_M,
            block_n, BLOCK_R, RANK_PAD // BLOCK_R if WIDE else 1, PARTS, WIDE_SPLIT, RANK_PAD,
            N_GROUP, REDUCE_IN_EXPAND, ADD_INPUTS, DORA, UPCAST_DOT,
        )  # fmt: skip


def fused_lora_kernel(  # type: ignore[no-untyped-def]
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
    nb_row_stride,
    y_col_offset,
    pair_cap,
    min_rank,
    split_jobs,
    scale,
    dora_ptr,
    dora_on_ptr,
    dora_stride,
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
    DORA: tl.constexpr,
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
    shrink_n, expand_n = jobs_of_width(n0, n1, n2, NUM_SLICES, K_SPLIT, 1, BLOCK_N * N_GROUP)
    # Wide tiles' jobs are split into the most parts (WIDE_SPLIT, half of it, or whole) for
    # which all of them stay within split_jobs.
    shrink_w = shrink_n
    expand_w = expand_n
    parts = num_tiles * 0 + 1
    if WIDE_SPLIT >= 4:
        shrink_w, expand_w, parts = split_if_fits(
            n0, n1, n2, n_wide, split_jobs, shrink_w, expand_w, parts, NUM_SLICES, K_SPLIT,
            WIDE_SPLIT // 2, BLOCK_N // (WIDE_SPLIT // 2) * N_GROUP,
        )  # fmt: skip
    if WIDE_SPLIT >= 2:
        shrink_w, expand_w, parts = split_if_fits(
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
        slot, tok64, m_mask, rank = tile_record(tiles_ptr, mt, m_rows, min_rank, BLOCK_M)
        # A tile's adapter is taken at the narrow width (BLOCK_R rank rows) when its rank fits,
        # else at the whole padded rank, its jobs in `parts` parts (see run_job): a rank-16 adapter
        # costs the same under any max_lora_rank. (Wide tiles exist only when RANK_PAD exceeds
        # BLOCK_R; the constexpr guards keep the paths a variant cannot take out of its code.)
        if wide & (parts > 1) & (parts == WIDE_SPLIT):
            if WIDE_SPLIT > 1:
                run_job(
                    is_shrink, within, mt, n0, n1, n2, slot, tok64, m_mask, rank, x_ptr, y_ptr,
                    a0_ptr, a1_ptr, a2_ptr, b0_ptr, b1_ptr, b2_ptr, part_ptr, inter_ptr, arrive_ptr,
                    ready_ptr, k_dim, stride_xm, stride_xk, stride_ym, stride_yn, a_slot_stride,
                    a_row_stride, b_row_stride, y_col_offset, scale, dora_ptr, dora_on_ptr,
                    dora_stride, NUM_SLICES, K_SPLIT, K_ITERS, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_R,
                    True, WIDE_SPLIT, WIDE_K_STEPS // WIDE_SPLIT, WIDE_SPLIT, RANK_PAD, N_GROUP,
                    WIDE_REDUCE_IN_EXPAND, ADD_INPUTS, DORA, UPCAST_DOT,
                )  # fmt: skip
        elif wide & (parts > 1):
            if WIDE_SPLIT >= 4:
                run_job(
                    is_shrink, within, mt, n0, n1, n2, slot, tok64, m_mask, rank, x_ptr, y_ptr,
                    a0_ptr, a1_ptr, a2_ptr, b0_ptr, b1_ptr, b2_ptr, part_ptr, inter_ptr, arrive_ptr,
                    ready_ptr, k_dim, stride_xm, stride_xk, stride_ym, stride_yn, a_slot_stride,
                    a_row_stride, b_row_stride, y_col_offset, scale, dora_ptr, dora_on_ptr,
                    dora_stride, NUM_SLICES, K_SPLIT, K_ITERS, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_R,
                    True, WIDE_SPLIT // 2, WIDE_K_STEPS // (WIDE_SPLIT // 2), WIDE_SPLIT, RANK_PAD,
                    N_GROUP, WIDE_REDUCE_IN_EXPAND, ADD_INPUTS, DORA, UPCAST_DOT,
                )  # fmt: skip
        elif wide:
            if RANK_PAD > BLOCK_R:
                run_job(
                    is_shrink, within, mt, n0, n1, n2, slot, tok64, m_mask, rank, x_ptr, y_ptr,
                    a0_ptr, a1_ptr, a2_ptr, b0_ptr, b1_ptr, b2_ptr, part_ptr, inter_ptr, arrive_ptr,
                    ready_ptr, k_dim, stride_xm, stride_xk, stride_ym, stride_yn, a_slot_stride,
                    a_row_stride, b_row_stride, y_col_offset, scale, dora_ptr, dora_on_ptr,
                    dora_stride, NUM_SLICES, K_SPLIT, K_ITERS, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_R,
                    True, 1, WIDE_K_STEPS, WIDE_SPLIT, RANK_PAD, N_GROUP, WIDE_REDUCE_IN_EXPAND,
                    ADD_INPUTS, DORA, UPCAST_DOT,
                )  # fmt: skip
        else:
            # Narrow tiles read B from the narrow copies (nb*: B's first BLOCK_R rank columns in
            # whole rows when the launcher has them, else B itself).
            run_job(
                is_shrink, within, mt, n0, n1, n2, slot, tok64, m_mask, rank, x_ptr, y_ptr, a0_ptr,
                a1_ptr, a2_ptr, nb0_ptr, nb1_ptr, nb2_ptr, part_ptr, inter_ptr, arrive_ptr,
                ready_ptr, k_dim, stride_xm, stride_xk, stride_ym, stride_yn, a_slot_stride,
                a_row_stride, nb_row_stride, y_col_offset, scale, dora_ptr, dora_on_ptr,
                dora_stride, NUM_SLICES, K_SPLIT, K_ITERS, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_R,
                False, 1, 1, WIDE_SPLIT, RANK_PAD, N_GROUP, REDUCE_IN_EXPAND, ADD_INPUTS, DORA,
                UPCAST_DOT,
            )  # fmt: skip
        job = tl.atomic_add(ctr_ptr, 1, sem="relaxed")
    # Every taker takes exactly one ticket past the last job, after all of its own jobs, so the
    # holder of the very last ticket knows every job is done: it resets the counters. No
    # counter is touched after that: every arrival and ready count was seen by an expand job's
    # acquiring wait, which came before that program's later tickets.
    if job == total + takers - 1:
        zero_counters(ready_ptr, n_pairs)
        zero_counters(arrive_ptr, n_pairs * WIDE_SPLIT)
        tl.atomic_xchg(ctr_ptr, 0)
