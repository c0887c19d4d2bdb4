"""The float64 reference itself, against a per-token loop written independently."""

from __future__ import annotations

import torch

from hi_moe_lora.kernels.reference_loops import lora_linear_reference


def test_reference_equals_token_loop() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    y = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    a = [torch.randn(2, 1, 3, 5, generator=gen, dtype=torch.float64) for _ in range(2)]
    b = [torch.randn(2, 1, n, 3, generator=gen, dtype=torch.float64) for n in (4, 3)]
    slots = torch.tensor([0, -1, 1, 1, 0, -1])
    got = lora_linear_reference(y, x, a, b, slots, 2.0, offset_start=2)
    want = y.clone()
    for t, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        col = 2
        for a_s, b_s in zip(a, b, strict=True):
            n = b_s.shape[2]
            for j in range(n):
                want[t, col + j] += 2.0 * sum(
                    sum(x[t, i] * a_s[s, 0, r, i] for i in range(5)) * b_s[s, 0, j, r]
                    for r in range(3)
                )
            col += n
    assert torch.allclose(got, want, atol=1e-12)


def test_reference_counts_the_rank_columns_a_narrower_b_lacks_as_zero() -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    a = [torch.randn(2, 1, 4, 4, generator=gen, dtype=torch.float64)]
    b_narrow = [torch.randn(2, 1, 6, 2, generator=gen, dtype=torch.float64)]
    b_padded = [torch.zeros(2, 1, 6, 4, dtype=torch.float64)]
    b_padded[0][..., :2] = b_narrow[0]
    slots = torch.tensor([0, -1, 1, 0, 1])
    got = lora_linear_reference(y, x, a, b_narrow, slots, 0.5)
    assert torch.allclose(got, lora_linear_reference(y, x, a, b_padded, slots, 0.5), atol=1e-12)
    assert not torch.allclose(got, y)  # the adapters did change the rows they serve


def test_reference_scales_dora_slots_tokens_only() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    a = [torch.randn(2, 1, 3, 4, generator=gen, dtype=torch.float64)]
    b = [torch.randn(2, 1, 6, 3, generator=gen, dtype=torch.float64)]
    slots = torch.tensor([0, -1, 1, 0, 1])
    scales = torch.rand(3, 6, generator=gen, dtype=torch.float64) + 0.5
    live = torch.tensor([1, 0], dtype=torch.int32)
    plain = lora_linear_reference(y, x, a, b, slots, 1.0)
    got = lora_linear_reference(y, x, a, b, slots, 1.0, dora_scales=scales, dora_live=live)
    for t, s in enumerate(slots.tolist()):
        want = plain[t] * scales[s] if s == 0 else plain[t]
        assert torch.allclose(got[t], want, atol=1e-12)
