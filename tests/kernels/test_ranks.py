"""Rank detection: exact last non-zero row, refresh only on slot changes, stale on new weights."""

from __future__ import annotations

import pytest
import torch

from hi_moe_lora.kernels.ranks import SlotRanks, detect_rank, tracker_for
from hi_moe_lora.kernels.warm_compile import compiling
from tests.support.triton_launches import record_launches


def _stack(ranks: list[int], pad: int = 16) -> torch.Tensor:
    a = torch.zeros(len(ranks), 1, pad, 8)
    for s, r in enumerate(ranks):
        a[s, 0, :r] = torch.randn(r, 8)
    return a


def test_detect_rank() -> None:
    a = _stack([3, 16, 0])
    assert [int(detect_rank(a, s)) for s in range(3)] == [3, 16, 0]


def test_refresh_uses_all_observed_weights_and_goes_stale_on_new_ones() -> None:
    tracker = SlotRanks(3, 16, "cpu")
    assert tracker.refresh([1, 2, None]) == [16, 16, 16]  # nothing observed: full rank
    tracker.observe([_stack([3, 5, 0])])
    assert tracker.stale
    assert tracker.refresh([1, 2, None]) == [3, 5, 16]
    assert not tracker.stale
    tracker.observe([_stack([4, 1, 0])])  # a new layer's weights
    assert tracker.stale
    assert tracker.refresh([1, 2, None]) == [4, 5, 16]


def test_only_changed_slots_are_recomputed() -> None:
    tracker = SlotRanks(2, 16, "cpu")
    a = _stack([3, 5])
    tracker.observe([a])
    assert tracker.refresh([1, 2]) == [3, 5]
    a[0, 0, :] = 1.0  # same adapter id in slot 0: not recomputed
    a[1, 0, :9] = 1.0  # new adapter id in slot 1: recomputed
    assert tracker.refresh([1, 3]) == [3, 9]


def test_tracker_lookup_is_by_identity() -> None:
    tracker = SlotRanks(2, 16, "cpu")
    assert tracker_for(tracker.ranks) is tracker
    assert tracker_for(torch.full((2,), 16, dtype=torch.int32)) is None


def test_new_b_makes_the_ranks_stale_and_refresh_fills_its_narrow_copy() -> None:
    tracker = SlotRanks(2, 64, "cpu")
    a = _stack([8, 40], pad=64)
    b = torch.randn(2, 1, 6, 64)
    tracker.observe([a], [b])
    assert tracker.stale
    (copy,) = tracker.narrow_b.copies_of([b]) or []
    assert tracker.refresh([1, 2]) == [8, 40]
    assert torch.equal(copy, b[:, 0, :, :16])
    b[1, 0] += 1.0  # a new adapter in slot 1 only
    tracker.refresh([1, 3])
    assert torch.equal(copy, b[:, 0, :, :16])


def test_narrow_copies_can_be_turned_off() -> None:
    tracker = SlotRanks(2, 64, "cpu", narrow_b=False)
    b = torch.randn(2, 1, 6, 64)
    tracker.observe([_stack([8, 40], pad=64)], [b])
    assert tracker.narrow_b.copies_of([b]) is None


@pytest.mark.parametrize("one_launch", [True, False])
def test_compile_refresh_asks_for_the_one_launch_kernels_and_changes_nothing(
    one_launch: bool, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a compiling block: the scan's and the copy's variants are asked for (only where
    the refresh launches them), and no rank, copy or flag moves."""
    from hi_moe_lora.kernels import narrow_copy, rank_scan

    tracker = SlotRanks(2, 64, device, one_launch=one_launch)
    b = torch.randn(2, 1, 6, 64, device=device)
    tracker.observe([_stack([8, 40], pad=64).to(device)], [b])
    scans = record_launches(monkeypatch, rank_scan)
    copies = record_launches(monkeypatch, narrow_copy)
    with compiling(1):
        tracker.compile_refresh()
    assert (len(scans), len(copies)) == ((1, 1) if one_launch else (0, 0))
    assert tracker.stale
    assert tracker.host == [64, 64]
    (copy,) = tracker.narrow_b.copies_of([b]) or []
    assert not copy.any()
    assert tracker.refresh([1, 2]) == [8, 40]
