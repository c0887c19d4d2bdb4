"""Narrow copies of B: made only for B stored wider than 16, rewritten per slot on refresh."""

from __future__ import annotations

import torch

from hi_moe_lora.kernels.narrow_b import NarrowB


def _b(slots: int, out: int, rank: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(slots, 1, out, rank, generator=torch.Generator().manual_seed(seed))


def test_copies_only_b_stored_wider_than_the_narrow_width() -> None:
    narrow = NarrowB()
    b64, b16 = _b(3, 8, 64), _b(3, 8, 16)
    assert narrow.observe([b64, b16]) is True
    assert narrow.copies_of([b16]) is None  # already whole rows: the kernel reads B itself
    (copy,) = narrow.copies_of([b64]) or []
    assert copy.shape == (3, 8, 16)
    assert copy.dtype == b64.dtype
    assert narrow.nbytes == 3 * 8 * 16 * 4
    assert narrow.observe([b64]) is False  # seen before: no new copy


def test_a_new_copy_is_zero_until_its_slots_are_refreshed() -> None:
    narrow = NarrowB()
    b = _b(3, 8, 32)
    narrow.observe([b])
    (copy,) = narrow.copies_of([b]) or []
    assert not copy.any()
    narrow.refresh([0, 2])
    assert torch.equal(copy[0], b[0, 0, :, :16])
    assert torch.equal(copy[2], b[2, 0, :, :16])
    assert not copy[1].any()


def test_refresh_rewrites_only_the_slots_named() -> None:
    narrow = NarrowB()
    b = _b(2, 8, 64)
    narrow.observe([b])
    narrow.refresh([0, 1])
    (copy,) = narrow.copies_of([b]) or []
    kept = copy[0].clone()
    b[:, 0, :, :16] += 1.0  # vLLM writes new adapters into both slots
    narrow.refresh([1])
    assert torch.equal(copy[0], kept)
    assert torch.equal(copy[1], b[1, 0, :, :16])


def test_disabled_makes_no_copies() -> None:
    narrow = NarrowB(enabled=False)
    b = _b(2, 8, 64)
    assert narrow.observe([b]) is False
    assert narrow.copies_of([b]) is None
    assert narrow.nbytes == 0


def test_a_tensor_of_another_layout_at_a_known_address_gets_no_copy() -> None:
    narrow = NarrowB()
    b = _b(2, 8, 64)
    narrow.observe([b])
    assert narrow.copies_of([b.view(2, 1, 16, 32)]) is None
