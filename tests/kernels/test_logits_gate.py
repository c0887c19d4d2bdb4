"""The logits-LoRA gate: needed only when a loaded adapter has LM-head weights."""

from __future__ import annotations

import torch

from hi_moe_lora.kernels.logits_gate import LogitsLoRAGate


def _stacked(nonzero_slots: dict[int, int], slots: int = 4, rank: int = 8) -> torch.Tensor:
    """vLLM-shaped ``[slots, 1, rank, hidden]`` LM-head A; slot -> real rank (others zero)."""
    a = torch.zeros(slots, 1, rank, 16)
    for slot, r in nonzero_slots.items():
        a[slot, 0, :r] = torch.randn(r, 16)
    return a


def test_all_zero_weights_are_not_needed() -> None:
    assert not LogitsLoRAGate().needed(_stacked({}), [11, 12, None, None])


def test_a_loaded_adapter_with_weights_is_needed() -> None:
    gate = LogitsLoRAGate()
    a = _stacked({2: 3})
    assert gate.needed(a, [11, None, 13, None])
    # The same weights in a slot with no adapter (or the no-LoRA id 0) do not count.
    assert not gate.needed(a, [11, None, None, None])
    assert not gate.needed(a, [11, None, 0, None])


def test_answer_is_cached_per_adapter_and_recomputed_when_the_slot_changes() -> None:
    gate = LogitsLoRAGate()
    a = _stacked({})
    assert not gate.needed(a, [21, None, None, None])
    a[0, 0, 0, 0] = 1.0  # same adapter id: the cached answer stands (ids name fixed weights)
    assert not gate.needed(a, [21, None, None, None])
    assert gate.needed(a, [22, None, None, None])  # a new adapter in slot 0: looked at again
    a[0].zero_()
    assert not gate.needed(a, [23, None, None, None])


def test_each_lm_head_is_tracked_on_its_own() -> None:
    gate = LogitsLoRAGate()
    ids = [5, None, None, None]
    empty, full = _stacked({}), _stacked({0: 8})  # both alive: vLLM's stacks are persistent
    assert not gate.needed(empty, ids)
    assert gate.needed(full, ids)
    assert not gate.needed(empty, ids)


def test_more_ids_than_slots_are_ignored() -> None:
    assert not LogitsLoRAGate().needed(_stacked({}, slots=2), [1, 2, 3, 4])
