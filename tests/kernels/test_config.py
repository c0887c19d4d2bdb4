"""Tile configuration: static, valid for tl.dot, decode vs prefill."""

from __future__ import annotations

import dataclasses

import pytest

from hi_moe_lora.kernels.config import (
    BLOCK_M_CHOICES,
    BLOCK_M_LARGE,
    BLOCK_M_SMALL,
    DECODE_EXPAND_JOBS,
    MAX_WIDE_SPLIT,
    NARROW_K_BLOCK_FROM_BUCKET,
    PREFILL_BLOCK_K,
    PREFILL_BUCKETS,
    PREFILL_WIDE_STEP_K,
    RANK_CHUNK,
    SMALL_M_LIMIT,
    KernelConfigError,
    block_m_for,
    choose_config,
    padded_rank,
)


@pytest.mark.parametrize(("rank", "block"), [(1, 16), (8, 16), (16, 16), (17, 32), (64, 64)])
def test_padded_rank(rank: int, block: int) -> None:
    assert padded_rank(rank) == block


def test_decode_and_prefill_tiles() -> None:
    decode = choose_config(16, 4096, 4096, 16, 132)
    assert decode.block_m == 16
    assert decode.n_group == 1
    # Few, wide expand jobs: at most DECODE_EXPAND_JOBS output tiles per token tile...
    for n_total in (4096, 6144):
        cfg = choose_config(16, 4096, n_total, 16, 132)
        assert -(-n_total // cfg.block_n) <= DECODE_EXPAND_JOBS
    # ... up to 512 columns (256 for calls of under 16 tokens).
    assert choose_config(16, 4096, 28672, 16, 132).block_n == 512
    assert choose_config(1, 4096, 28672, 16, 132).block_n == 256
    # Many token tiles: wider K chunks on the wide layers, not on the square projection.
    assert choose_config(64, 4096, 28672, 16, 132, 16).block_k > (
        choose_config(1, 4096, 28672, 16, 132, 16).block_k
    )
    assert choose_config(64, 4096, 4096, 16, 132, 16).block_k == 256
    prefill = choose_config(1024, 4096, 28672, 64, 132)
    assert prefill.block_m == 64
    assert prefill.n_group > 1
    # Batches mixing decodes with a prefill chunk (up to SMALL_M_LIMIT rows) take the decode tiles.
    assert block_m_for(SMALL_M_LIMIT) == BLOCK_M_SMALL
    assert block_m_for(SMALL_M_LIMIT + 1) == BLOCK_M_LARGE
    assert PREFILL_BUCKETS[0] > SMALL_M_LIMIT  # every prefill bucket is reachable
    for m in (1, 64, 65, 4096):
        assert block_m_for(m) in BLOCK_M_CHOICES
        cfg = choose_config(m, 14336, 4096, 64, 132)
        assert min(cfg.block_m, cfg.block_n, cfg.block_k, cfg.block_r) >= 16


@pytest.mark.parametrize("m", [1, 16, 64])
def test_decode_tiles_under_a_wide_max_rank(m: int) -> None:
    """Under max rank 64 a decode call has the same narrow rank width, warps and output tiles
    as under 16; its K chunks are capped at 512 (the wide path's K steps), and its wide tiles'
    jobs are split into four parts of a narrow job's size."""
    for k, n_total in ((4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)):
        low = choose_config(m, k, n_total, 16, 132, 16)
        high = choose_config(m, k, n_total, 64, 132, 16)
        assert high.block_r == low.block_r == RANK_CHUNK
        assert (high.rank_pad, low.rank_pad) == (64, 16)
        assert high == dataclasses.replace(
            low, rank_pad=64, block_k=min(low.block_k, 512), wide_split=4
        )


def test_prefill_has_the_narrow_rank_width_under_a_wide_max_rank() -> None:
    cfg = choose_config(1024, 4096, 6144, 40, 132)
    assert (cfg.block_r, cfg.rank_pad) == (RANK_CHUNK, 64)


def test_wide_split_and_shrink_steps() -> None:
    """At decode sizes wide tiles' jobs may be split into parts of the narrow rank width (at
    most MAX_WIDE_SPLIT); a whole wide shrink job takes its K chunk in one step per narrow width
    of the padded rank; prefill keeps one part, and from a padded rank of 64 takes each K block
    in steps of PREFILL_WIDE_STEP_K (the narrow tiles the whole block)."""
    split = {r: choose_config(16, 4096, 6144, r, 132) for r in (16, 32, 64, 128)}
    assert [(c.wide_split, c.wide_rows, c.wide_k_steps) for c in split.values()] == [
        (1, 16, 1),
        (2, 16, 2),
        (4, 16, 4),
        (MAX_WIDE_SPLIT, 128 // MAX_WIDE_SPLIT, 128 // RANK_CHUNK),
    ]
    assert split[64].wide_block_n == split[64].block_n // 4
    prefill = {r: choose_config(2048, 4096, 6144, r, 132) for r in (16, 32, 64, 128)}
    assert [(c.block_k, c.wide_split, c.wide_k_steps) for c in prefill.values()] == [
        (PREFILL_BLOCK_K, 1, 1),
        (PREFILL_BLOCK_K, 1, 1),
        (PREFILL_BLOCK_K, 1, PREFILL_BLOCK_K // PREFILL_WIDE_STEP_K),
        (PREFILL_BLOCK_K, 1, PREFILL_BLOCK_K // PREFILL_WIDE_STEP_K),
    ]
    small = choose_config(512, 4096, 6144, 64, 132)
    assert (small.block_k, small.wide_step_k, small.wide_k_steps) == (PREFILL_WIDE_STEP_K, 0, 1)


def test_prefill_narrow_tiles_keep_their_k_block_under_a_wide_max_rank() -> None:
    """A prefill call of a large bucket under max rank 64 has max rank 16's K block and K
    chunks: only the wide path's steps differ. Smaller buckets take one K block of 64."""
    assert NARROW_K_BLOCK_FROM_BUCKET in PREFILL_BUCKETS
    for m in (NARROW_K_BLOCK_FROM_BUCKET // 2 + 1, 2048, 8192):
        for k, n_total in ((4096, 6144), (4096, 28672), (14336, 4096)):
            low = choose_config(m, k, n_total, 16, 132, 16)
            high = choose_config(m, k, n_total, 64, 132, 16)
            assert high == dataclasses.replace(low, rank_pad=64, wide_step_k=PREFILL_WIDE_STEP_K)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"wide_split": 3}, "power of two"),
        ({"wide_split": 8}, "power of two"),
        ({"wide_split": 4, "rank_pad": 32}, "rank rows"),
        ({"wide_split": 4, "block_n": 32}, "columns"),
        ({"wide_split": 2, "k_iters": 2}, "one K iteration"),
        ({"wide_split": 1, "block_k": 32}, "K steps"),
        ({"rank_pad": 40}, "multiple"),
        ({"wide_step_k": 48}, "wide_step_k"),
        ({"wide_step_k": 8}, "wide_step_k"),
    ],
)
def test_check_rejects_configs_the_kernel_cannot_run(changes: dict[str, int], problem: str) -> None:
    base = choose_config(16, 4096, 6144, 64, 132)
    base.check()
    with pytest.raises(KernelConfigError, match=problem):
        dataclasses.replace(base, **changes).check()  # type: ignore[arg-type]


def test_reduction_choice_per_rank_width() -> None:
    """down at M = 16 under max rank 64: narrow tiles re-read their partials in the expand
    jobs; wide ones (four times the partial bytes) are reduced once by the last shrink job."""
    cfg = choose_config(16, 14336, 4096, 64, 132)
    assert cfg.reduces_in_expand(14336, [4096])
    assert not cfg.reduces_in_expand(14336, [4096], wide=True)
    o_proj = choose_config(1, 4096, 4096, 16, 132)
    assert o_proj.reduces_in_expand(4096, [4096])
    assert o_proj.reduces_in_expand(4096, [4096], wide=True)


def test_rejects_empty_problems() -> None:
    with pytest.raises(KernelConfigError):
        choose_config(0, 16, 16, 16, 1)
    with pytest.raises(KernelConfigError):
        padded_rank(0)


def test_a_configuration_class_is_the_count_at_decode_sizes_and_the_bucket_above() -> None:
    from hi_moe_lora.kernels.config import SMALL_M_LIMIT, config_class

    assert [config_class(m) for m in (1, 17, SMALL_M_LIMIT)] == [1, 17, SMALL_M_LIMIT]
    above = (SMALL_M_LIMIT + 1, 1024, 1025, 4096, 4097, 16384, 50000)
    assert [config_class(m) for m in above] == [1024, 1024, 4096, 4096, 16384, 16384, 16384]
    for m in (SMALL_M_LIMIT + 1, 1800, 5000):  # one configuration a class
        assert choose_config(m, 4096, 28672, 16, 132, 16) == choose_config(
            config_class(m), 4096, 28672, 16, 132, 16
        )
