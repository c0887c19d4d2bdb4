"""Tile configuration: static, valid for tl.dot, decode vs prefill."""

from __future__ import annotations

import pytest

from hi_moe_lora.kernels.config import (
    BLOCK_M_CHOICES,
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
    assert choose_config(1, 4096, 28672, 16, 132).block_n > decode.block_n
    prefill = choose_config(1024, 4096, 28672, 64, 132)
    assert prefill.block_m == 64
    assert prefill.n_group > 1
    for m in (1, 64, 65, 4096):
        assert block_m_for(m) in BLOCK_M_CHOICES
        cfg = choose_config(m, 14336, 4096, 64, 132)
        assert min(cfg.block_m, cfg.block_n, cfg.block_k, cfg.block_r) >= 16


def test_rejects_empty_problems() -> None:
    with pytest.raises(KernelConfigError):
        choose_config(0, 16, 16, 16, 1)
    with pytest.raises(KernelConfigError):
        padded_rank(0)
