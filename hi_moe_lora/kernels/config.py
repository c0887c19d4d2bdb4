"""Tile configuration for the fused LoRA kernel, chosen from the static shape of a call.

Everything here depends only on values that are fixed when a CUDA graph is captured (the number
of token rows ``m`` of the call, the input width ``k``, the output widths of the slices and the
padded rank), never on the per-step data, so a captured launch stays valid on every replay.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Token-tile heights for which the work list is built every step (see :mod:`.worklist`).
BLOCK_M_SMALL = 16
BLOCK_M_LARGE = 64
BLOCK_M_CHOICES = (BLOCK_M_SMALL, BLOCK_M_LARGE)

#: Calls with at most this many token rows use the small token tile (decode-sized batches).
SMALL_M_LIMIT = 64


class KernelConfigError(ValueError):
    """A shape the fused kernel cannot take."""


@dataclass(frozen=True)
class TileConfig:
    """Compile-time parameters of one launch of the fused kernel."""

    block_m: int
    block_n: int
    block_k: int
    block_r: int
    n_group: int
    num_warps: int
    num_stages: int


def padded_rank(max_rank: int) -> int:
    """The rank block: the next power of two, at least 16 (``tl.dot``'s minimum)."""
    if max_rank < 1:
        raise KernelConfigError(f"rank must be >= 1, got {max_rank}")
    block = 16
    while block < max_rank:
        block *= 2
    return block


def block_m_for(m: int) -> int:
    """Token-tile height for a call with ``m`` token rows."""
    return BLOCK_M_SMALL if m <= SMALL_M_LIMIT else BLOCK_M_LARGE


def choose_config(m: int, k: int, n_total: int, max_rank: int, num_sms: int) -> TileConfig:
    """Pick the tile configuration for one call.

    Decode-sized calls (``m <= 64``) take 16-row token tiles and one output tile per program; the
    output tile widens with the layer width so that the number of programs stays near one or two
    waves (every program re-reads its adapter's A, so more programs only add L2 traffic).
    Prefill calls take 64-row token tiles and let a program walk several output tiles with the
    same rank-sized intermediate (``n_group``), which bounds the recomputed shrink.
    """
    if m < 1 or k < 1 or n_total < 1:
        raise KernelConfigError(f"empty problem: m={m} k={k} n={n_total}")
    block_r = padded_rank(max_rank)
    block_m = block_m_for(m)
    if block_m == BLOCK_M_SMALL:
        if n_total <= 8192:
            block_n = 64
        elif n_total <= 16384:
            block_n = 128
        else:
            block_n = 256
        block_k = 256 if block_r <= 32 else 128
        return TileConfig(block_m, block_n, block_k, block_r, 1, 4, 3)
    block_n = 128
    block_k = 64 if block_r >= 64 else 128
    m_tiles = -(-m // block_m)
    n_tiles = -(-n_total // block_n)
    target_programs = 2 * max(num_sms, 1)
    n_group = 1
    while n_group < 8 and m_tiles * (-(-n_tiles // (n_group * 2))) >= target_programs:
        n_group *= 2
    return TileConfig(block_m, block_n, block_k, block_r, n_group, 4, 3)
