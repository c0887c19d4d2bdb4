"""The fused kernel's view of the work list: tile records and the job counts of a step.

A tile record (written on the host by :mod:`hi_moe_lora.kernels.worklist`) holds a token tile's
adapter slot, real rank, length and token rows; one load hands a job everything it needs, and
every job (shrink or expand) reads its tile through :func:`tile_record`. The job counts say how
many tickets a tile's work takes at each rank width, and the last ticket's taker resets the
counters with :func:`zero_counters`.
"""

from __future__ import annotations

import triton.language as tl

from hi_moe_lora.kernels.worklist import HEADER_SIZE

#: Where the work list's tile records start, past its header (the kernel's view of it).
RECORDS_AT = tl.constexpr(HEADER_SIZE)


def tile_record(  # type: ignore[no-untyped-def]
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
    rec = tiles_ptr + RECORDS_AT + mt * (3 + BLOCK_M)
    offs_m = tl.arange(0, BLOCK_M)
    slot = tl.load(rec)
    rank = tl.load(rec + 1)
    count = tl.load(rec + 2)
    tok = tl.load(rec + 3 + offs_m)
    rank = tl.where(rank < min_rank, min_rank, rank)
    m_mask = (offs_m < count) & (tok < m_rows)
    return slot.to(tl.int64), tok.to(tl.int64), m_mask, rank


def zero_counters(ptr, count) -> None:  # type: ignore[no-untyped-def]
    """Set ``count`` int32 counters from ``ptr`` on to zero."""
    offs = tl.arange(0, 128)
    for c0 in range(0, count, 128):
        tl.store(ptr + c0 + offs, tl.full((128,), 0, tl.int32), mask=c0 + offs < count)


def jobs_of_width(  # type: ignore[no-untyped-def]
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


def split_if_fits(  # type: ignore[no-untyped-def]
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
    shrink_p, expand_p = jobs_of_width(n0, n1, n2, NUM_SLICES, K_SPLIT, PARTS, SPAN)
    fits = n_wide * (shrink_p + expand_p) <= split_jobs
    return (
        tl.where(fits, shrink_p, shrink_w),
        tl.where(fits, expand_p, expand_w),
        tl.where(fits, PARTS, parts),
    )
