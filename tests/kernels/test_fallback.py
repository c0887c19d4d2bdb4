"""PyTorch fallback against the float64 reference."""

from __future__ import annotations

import pytest
import torch

from hi_moe_lora.kernels.fallback import lora_linear_torch
from hi_moe_lora.kernels.reference_loops import lora_linear_reference

from .lora_cases import make_problem, tolerance


@pytest.mark.parametrize("m", [1, 17, 70])
@pytest.mark.parametrize("add_inputs", [True, False])
def test_fallback_matches_reference(m: int, add_inputs: bool) -> None:
    slots = torch.randint(-1, 3, (m,), generator=torch.Generator().manual_seed(m))
    p = make_problem(m, 40, [24, 8], [8, 16, 4], slots, max_rank=16, seed=m)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.25, 0, add_inputs)
    bm = 16 if m <= 64 else 64
    lora_linear_torch(p.y, p.x, p.lora_a, p.lora_b, p.work.tiles[bm], bm, 0.25, 0, add_inputs)
    assert (p.y.double() - ref).abs().max().item() <= tolerance(torch.float16, ref)


def test_fallback_dora_epilogue_matches_reference() -> None:
    """DoRA slot 0, LoRA slots 1 and 2, base-model tokens: ``g * (y + delta)`` for slot 0's."""
    slots = torch.randint(-1, 3, (23,), generator=torch.Generator().manual_seed(9))
    p = make_problem(23, 40, [24, 8], [8, 16, 4], slots, max_rank=16, seed=9)
    scales = 0.5 + torch.rand(4, 32, generator=torch.Generator().manual_seed(1))
    live = torch.tensor([1, 0, 0], dtype=torch.int32)
    ref = lora_linear_reference(
        p.y, p.x, p.lora_a, p.lora_b, slots, 0.25, dora_scales=scales, dora_live=live
    )
    lora_linear_torch(
        p.y, p.x, p.lora_a, p.lora_b, p.work.tiles[16], 16, 0.25, 0, True, 0, scales, live
    )
    assert (p.y.double() - ref).abs().max().item() <= tolerance(torch.float16, ref)
