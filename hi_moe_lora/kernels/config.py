"""Tile configuration for the fused LoRA kernel, chosen from the static shape of a call.

Everything here depends only on values that are fixed when a CUDA graph is captured (the number
of token rows ``m`` of the call, the input width ``k``, the output widths of the slices and the
padded rank), never on the per-step data, so a captured launch stays valid on every replay.

Every call takes an adapter of rank at most :data:`RANK_CHUNK` at that narrow width and a wider
one at the whole padded rank (chosen per token tile on the device from the work list): a
rank-16 adapter costs the same under ``--max-lora-rank 64`` as under 16.

The kernel splits the shrink over the input width: a shrink job reduces ``k_chunk`` columns
(``k_iters`` iterations of ``block_k``), so a decode-sized call spreads the read of A over many
SMs instead of streaming it through one; the last job of a (token tile, slice) sums the
partials. Expand jobs cover ``block_n * n_group`` output columns each.

At decode sizes a wide tile's work may be split ``wide_split`` ways more than a narrow tile's:
each shrink job reads ``rank_pad / wide_split`` rank rows of its K chunk, each expand job covers
``1 / wide_split`` of a narrow job's columns. With ``wide_split = rank_pad / block_r`` a wide
job moves the same bytes as a narrow one, and the extra parallelism comes from more programs
rather than from more warps per program (which would cost the narrow tiles occupancy). The
kernel takes the most parts (``wide_split``, half of it, or whole) for which all wide jobs fit
:data:`WIDE_SPLIT_WAVES` waves of its programs (decided on the device from the step's tiles):
with many wide tiles the launch has parallelism enough, and the extra jobs' fixed costs win (on
an H100, gate_up at rank 64 with four tiles: 57 µs split four ways against 32 µs whole).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

#: Token-tile heights for which the work list is built every step (see :mod:`.worklist`).
BLOCK_M_SMALL = 16
BLOCK_M_LARGE = 64
BLOCK_M_CHOICES = (BLOCK_M_SMALL, BLOCK_M_LARGE)

#: Calls with at most this many token rows use the small token tile and the decode configs.
#: H100 A/Bs against the prefill configs (``benchmarks/kernels/ab_kernels.py``; raw tables in
#: ``benchmarks/kernels/results/h100_ab_2026-11-22_small_m_limit.txt``): at M = 96-256 the
#: decode path is up to 24 % faster with one rank-16 adapter (gate_up at M = 256 excepted, 10 %
#: slower) and up to 38 % with 8 adapters; at M = 320-512 it is 5-25 % slower.
SMALL_M_LIMIT = 256
#: Token-count buckets for prefill-sized calls (see ``choose_config``); every call above
#: :data:`SMALL_M_LIMIT` falls in one.
PREFILL_BUCKETS = (1024, 4096, 16384)
#: Most K chunks one (token tile, slice) is split into.
MAX_K_SPLIT = 32
#: Token tiles (upper bound) from which a decode-sized call uses wider K chunks.
MANY_TILES = 8
#: Padded max rank from which decode-sized calls cap their K chunks for the wide path.
WIDE_RANK_PAD = 64
#: Narrow rank width (decode and prefill): adapters up to this rank are taken at it whatever
#: ``max_lora_rank``; wider ones at the whole padded rank.
RANK_CHUNK = 16
#: K block of prefill-sized calls' narrow tiles (and of every tile under a padded rank below
#: :data:`WIDE_RANK_PAD`).
PREFILL_BLOCK_K = 128
#: K step of the wide path's prefill shrink from a padded rank of :data:`WIDE_RANK_PAD` on: its
#: A tile is ``rank_pad`` rows deep, so it takes the K block in steps of this many columns.
PREFILL_WIDE_STEP_K = 64
#: Smallest prefill bucket whose narrow tiles keep :data:`PREFILL_BLOCK_K` under a padded rank of
#: :data:`WIDE_RANK_PAD` or more; smaller buckets take K blocks of :data:`PREFILL_WIDE_STEP_K`
#: for every tile. A trade measured on an H200 (benchmarks/README.md, sixth window): at M = 2048
#: rank-16 adapters under max rank 64 were 5-12 % faster on all four projections and rank-64
#: adapters 4-8 % slower (gate_up and down); at M = 512 rank-16 adapters gained nothing and qkv,
#: o and rank-64 adapters lost 3-13 %.
NARROW_K_BLOCK_FROM_BUCKET = 4096
#: Per token tile, the most partial-sum bytes expand jobs may re-read instead of a reduction step.
REDUCE_IN_EXPAND_BYTES = 2**20
#: Most parts a wide tile's jobs are split into (sizes the arrival counters, see ``.worklist``).
MAX_WIDE_SPLIT = 4
#: Wide tiles are split only into as many parts as keep all their jobs within this many waves of
#: the launch's programs.
WIDE_SPLIT_WAVES = 3


class KernelConfigError(ValueError):
    """A shape the fused kernel cannot take."""


@dataclass(frozen=True)
class TileConfig:
    """Compile-time parameters of one launch of the fused kernel."""

    block_m: int
    block_n: int
    block_k: int
    #: Narrow rank width: tiles whose adapter's rank fits take this many rank rows, the others
    #: the whole ``rank_pad`` (equal to it: one width).
    block_r: int
    k_iters: int
    n_group: int
    num_warps: int
    num_stages: int
    #: Padded rank (a multiple of ``block_r``): the column count of the rank-sized scratch tiles.
    rank_pad: int
    #: Parts a wide tile's shrink (rank rows) and expand (output columns) jobs are split into.
    wide_split: int = 1
    #: Prefill sizes: the wide path's K step when it is narrower than ``block_k`` (0: the
    #: rule of :attr:`wide_k_steps`).
    wide_step_k: int = 0

    @property
    def wide_rows(self) -> int:
        """Rank rows of one wide shrink job."""
        return self.rank_pad // self.wide_split

    @property
    def wide_block_n(self) -> int:
        """Output columns of one wide expand tile."""
        return self.block_n // self.wide_split

    @property
    def k_chunk(self) -> int:
        return self.block_k * self.k_iters

    def k_split(self, k: int) -> int:
        return -(-k // self.k_chunk)

    def expand_jobs(self, widths: Sequence[int], wide: bool = False) -> int:
        """Expand jobs per narrow (or ``wide``) token tile for slices of these output widths."""
        span = (self.wide_block_n if wide else self.block_n) * self.n_group
        return sum(-(-w // span) for w in widths)

    def reduces_in_expand(self, k: int, widths: Sequence[int], wide: bool = False) -> bool:
        """Whether expand jobs sum the partials themselves (the re-read stays small), instead of
        the last shrink job summing them once; for narrow tiles, or for ``wide`` ones, whose
        partials are ``rank_pad`` wide (on an H100, down and gate_up at rank 64 and M = 16:
        1.0-1.3 µs faster reduced once than re-read). Wide tiles are counted split; a launch
        whose wide tiles stay whole (many of them) keeps that choice (on an H100 reducing once
        was as fast or faster there: o, down and gate_up at M = 64 with 8 adapters)."""
        rank_rows = self.rank_pad if wide else self.block_r
        reread = self.expand_jobs(widths, wide) * self.k_split(k) * self.block_m * rank_rows * 4
        return reread <= REDUCE_IN_EXPAND_BYTES

    @property
    def wide_k_steps(self) -> int:
        """K steps per K block of a whole wide-rank shrink job: at one K iteration (decode
        sizes) the chunk is taken in ``rank_pad / block_r`` unrolled steps, so that a step holds
        no more of A than a narrow one; prefill sizes keep their pipelined K loop, in steps of
        ``wide_step_k`` where it is set (the narrow tiles keep the whole ``block_k``), else one
        per iteration. A job of a split wide tile takes ``wide_k_steps / wide_split`` of them.
        (Narrower steps spill less but measured no faster on an H100: ``benchmarks/README.md``.)
        """
        if self.k_iters == 1:
            return self.rank_pad // self.block_r
        return self.block_k // self.wide_step_k if self.wide_step_k else 1

    def check(self) -> None:
        """Raise :class:`KernelConfigError` for parameters the kernel cannot run with."""
        if self.rank_pad % self.block_r:
            raise KernelConfigError(f"rank_pad {self.rank_pad} is not a multiple of {self.block_r}")
        split = self.wide_split
        if split < 1 or split > MAX_WIDE_SPLIT or split & (split - 1):
            raise KernelConfigError(f"wide_split {split} is not a power of two <= {MAX_WIDE_SPLIT}")
        if self.wide_rows < self.block_r or self.wide_block_n < 16:
            raise KernelConfigError(
                f"wide_split {split} leaves parts of {self.wide_rows} rank rows and "
                f"{self.wide_block_n} columns (at least {self.block_r} and 16)"
            )
        if split > 1 and self.k_iters != 1:
            raise KernelConfigError("wide_split > 1 needs one K iteration (decode sizes)")
        if self.wide_step_k and (self.wide_step_k < 16 or self.block_k % self.wide_step_k):
            raise KernelConfigError(
                f"wide_step_k {self.wide_step_k} must divide block_k {self.block_k} (at least 16)"
            )
        steps = self.wide_k_steps
        if self.block_k % steps or self.block_k // steps < 16:
            raise KernelConfigError(
                f"block_k {self.block_k} must split into {steps} K steps of at least 16 "
                "(the wide rank path at one K iteration)"
            )


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


def _pow2_at_least(value: int) -> int:
    out = 1
    while out < value:
        out *= 2
    return out


#: Most expand jobs per token tile at decode sizes.
DECODE_EXPAND_JOBS = 16


def _decode_block_n(m: int, n_total: int) -> int:
    """Output columns per expand job at decode sizes.

    Each expand job pays a fixed chain of dependent round trips (ticket, tile record, wait for
    the shrink), so jobs are few and wide: at most :data:`DECODE_EXPAND_JOBS` per token tile,
    capped at 512 columns (256 for calls of under 16 tokens, where the narrower tile measured
    faster).
    """
    cap = 512 if m >= BLOCK_M_SMALL else 256
    block_n = 64
    while block_n < cap and -(-n_total // block_n) > DECODE_EXPAND_JOBS:
        block_n *= 2
    return block_n


def choose_config(
    m: int, k: int, n_total: int, max_rank: int, num_sms: int, num_slots: int = 1
) -> TileConfig:
    """Pick the tile configuration for one call (see the module docstring). A prefill-sized
    call's configuration depends on its token bucket only, so configurations are memoised per
    bucket (a decode-sized one per token count): every op call asks."""
    if m < 1 or k < 1 or n_total < 1:
        raise KernelConfigError(f"empty problem: m={m} k={k} n={n_total}")
    if m > SMALL_M_LIMIT:
        m = config_class(m)
        num_slots = 1
    return _choose_config(m, k, n_total, max_rank, num_sms, num_slots)


def config_class(m: int) -> int:
    """The token count that decides a call's configuration: ``m`` itself at decode sizes, its
    prefill bucket above :data:`SMALL_M_LIMIT` (calls of one class and one layer share their
    configuration, :func:`choose_config`)."""
    if m <= SMALL_M_LIMIT:
        return m
    return next((b for b in PREFILL_BUCKETS if m <= b), PREFILL_BUCKETS[-1])


@functools.lru_cache(maxsize=4096)
def _choose_config(
    m: int, k: int, n_total: int, max_rank: int, num_sms: int, num_slots: int
) -> TileConfig:
    rank_pad = padded_rank(max_rank)
    block_m = block_m_for(m)
    if block_m == BLOCK_M_SMALL:
        # One iteration per shrink job. Chunks of 256 (512 for very wide inputs) measured best
        # on an H100; fewer, wider chunks lengthen each job's serial dot, more add partials.
        # With many token tiles there is parallelism enough: wider chunks, fewer partials
        # (except on the square 4096 x 4096 projection, where 256 stayed best).
        tiles_ub = -(-m // block_m) + min(num_slots, m) - 1
        block_k = 512 if k > 8192 else 256
        if tiles_ub >= MANY_TILES and k + n_total > 8192:
            block_k *= 2
        if rank_pad >= WIDE_RANK_PAD:
            # K chunks of at most 512 keep the wide path's steps small (from an H100 sweep of
            # the rank-chunk kernel: down, gate_up and o at M = 16/64, ranks 16 and 64 under
            # max rank 64; not re-swept for the two-width kernel).
            block_k = min(block_k, 512)
        while -(-k // block_k) > MAX_K_SPLIT:
            block_k *= 2
        block_n = _decode_block_n(m, n_total)
        # Wide tiles in jobs of a narrow one's size (see the module docstring).
        wide_split = min(MAX_WIDE_SPLIT, rank_pad // RANK_CHUNK)
        return TileConfig(block_m, block_n, block_k, RANK_CHUNK, 1, 1, 4, 1, rank_pad, wide_split)
    # Prefill: the expand tiles' groups share the tile's intermediate. Bucket the token count
    # so that a server meets few compiled variants (each new one is a JIT compile during
    # serving).
    bucket = config_class(m)
    # Under a padded rank of 64 or more the wide path's A tiles are rank_pad rows deep and take
    # K steps of 64; in large buckets the narrow tiles keep K blocks of 128 (the wide path then
    # takes each in two steps), in small ones every tile takes 64.
    block_k = PREFILL_BLOCK_K
    wide_step_k = 0
    if rank_pad >= WIDE_RANK_PAD:
        if bucket >= NARROW_K_BLOCK_FROM_BUCKET:
            wide_step_k = PREFILL_WIDE_STEP_K
        else:
            block_k = PREFILL_WIDE_STEP_K
    m_tiles = -(-bucket // block_m)
    # Enough shrink jobs for about two waves, no more (partials cost traffic).
    want_split = max(1, min(MAX_K_SPLIT, -(-2 * max(num_sms, 1) // max(m_tiles, 1))))
    k_iters = max(1, -(-k // (block_k * want_split)))
    block_n = 128
    n_tiles = -(-n_total // block_n)
    n_group = 1
    while n_group < 4 and m_tiles * (-(-n_tiles // (n_group * 2))) >= 2 * max(num_sms, 1):
        n_group *= 2
    return TileConfig(
        block_m, block_n, block_k, RANK_CHUNK, k_iters, n_group, 4, 3, rank_pad,
        wide_step_k=wide_step_k,
    )  # fmt: skip
