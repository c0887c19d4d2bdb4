"""Rank detection: exact last non-zero row, refresh only on slot changes, reset on new weights."""

from __future__ import annotations

import torch

from hi_moe_lora.kernels.ranks import SlotRanks, detect_rank, observe


def _stack(ranks: list[int], pad: int = 16) -> torch.Tensor:
    a = torch.zeros(len(ranks), 1, pad, 8)
    for s, r in enumerate(ranks):
        a[s, 0, :r] = torch.randn(r, 8)
    return a


def test_detect_rank() -> None:
    a = _stack([3, 16, 0])
    assert [int(detect_rank(a, s)) for s in range(3)] == [3, 16, 0]


def test_refresh_uses_all_observed_weights_and_resets_on_new_ones() -> None:
    tracker = SlotRanks(3, 16, "cpu")
    tracker.refresh([1, 2, None])
    assert tracker.ranks.tolist() == [16, 16, 16]  # nothing observed: full rank
    observe(tracker.ranks, [_stack([3, 5, 0])])
    tracker.refresh([1, 2, None])
    assert tracker.ranks.tolist() == [3, 5, 16]
    observe(tracker.ranks, [_stack([4, 1, 0])])  # a new layer's weights: back to full rank
    assert tracker.ranks.tolist() == [16, 16, 16]
    tracker.refresh([1, 2, None])
    assert tracker.ranks.tolist() == [4, 5, 16]


def test_unrelated_rank_tensor_is_ignored() -> None:
    stray = torch.full((2,), 16, dtype=torch.int32)
    observe(stray, [_stack([1, 1])])
    assert stray.tolist() == [16, 16]
