"""What the fused kernel's shrink and expand jobs share: the float32 partials of a (tile,
slice) pair, the rank-sized intermediate they are summed into, and the tensor-core product."""

from __future__ import annotations

import triton.language as tl


def mma(a, b, UPCAST_DOT: tl.constexpr):  # type: ignore[no-untyped-def]
    """``a @ b`` accumulated in float32 (operands upcast first on the CPU interpreter)."""
    if UPCAST_DOT:
        return tl.dot(a.to(tl.float32), b.to(tl.float32))
    return tl.dot(a.to(b.dtype), b)


def rank_tile_offsets(  # type: ignore[no-untyped-def]
    r0,
    BLOCK_M: tl.constexpr,
    R: tl.constexpr,
    RANK_PAD: tl.constexpr,
):
    """Offsets of rank columns ``r0 .. r0 + R`` in a ``BLOCK_M x RANK_PAD`` scratch tile."""
    return tl.arange(0, BLOCK_M)[:, None] * RANK_PAD + r0 + tl.arange(0, R)[None, :]


def sum_partials(  # type: ignore[no-untyped-def]
    part_ptr,
    pair,
    r0,
    K_SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    R: tl.constexpr,
    RANK_PAD: tl.constexpr,
):
    """Rank columns ``r0 .. r0 + R`` of a pair's shrink, its K chunks summed in order."""
    offs = rank_tile_offsets(r0, BLOCK_M, R, RANK_PAD)
    summed = tl.full((BLOCK_M, R), 0.0, tl.float32)
    first = pair.to(tl.int64) * K_SPLIT
    for i in tl.static_range(K_SPLIT):
        summed += tl.load(
            part_ptr + (first + i) * (BLOCK_M * RANK_PAD) + offs, cache_modifier=".cg"
        )
    return summed


def intermediate(  # type: ignore[no-untyped-def]
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
        summed = sum_partials(part_ptr, pair, r0, K_SPLIT, BLOCK_M, R, RANK_PAD)
        return (summed * scale).to(inter_ptr.dtype.element_ty)
    offs = rank_tile_offsets(r0, BLOCK_M, R, RANK_PAD)
    return tl.load(
        inter_ptr + pair.to(tl.int64) * (BLOCK_M * RANK_PAD) + offs, cache_modifier=".cg"
    )
