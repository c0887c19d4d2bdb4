"""The logits LoRA over one request's prompt rows: which slot, and its delta in float32."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hi_moe_lora.kernels.prompt_logits import (  # noqa: E402
    NO_ADAPTER,
    add_logits_lora_of_slot,
    step_slot,
)

SLOTS, RANK, HIDDEN, VOCAB, PADDED = 3, 4, 8, 20, 24


def test_the_step_slot_is_the_one_every_request_uses() -> None:
    assert step_slot(torch.tensor([2, 2, 2])) == 2
    assert step_slot(torch.tensor([NO_ADAPTER])) == NO_ADAPTER
    assert step_slot(torch.tensor([2, 0, 2])) is None
    assert step_slot(torch.tensor([2, NO_ADAPTER])) is None
    assert step_slot(torch.tensor([], dtype=torch.long)) is None


def weights(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(4)
    lora_a = torch.randn(SLOTS, 1, RANK, HIDDEN, generator=generator)
    lora_b = torch.randn(SLOTS, 1, VOCAB, RANK, generator=generator)
    return lora_a.to(dtype), lora_b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_row_gets_the_slots_delta_and_the_padding_nothing(dtype: torch.dtype) -> None:
    lora_a, lora_b = weights(dtype)
    x = torch.randn(7, HIDDEN, generator=torch.Generator().manual_seed(5)).to(dtype)
    logits = torch.randn(7, PADDED, generator=torch.Generator().manual_seed(6))
    y = logits.clone()
    add_logits_lora_of_slot(y, x, lora_a, lora_b, 1, 0.5)
    a, b = lora_a[1, 0].double(), lora_b[1, 0].double()
    want = logits.double()
    want[:, :VOCAB] += 0.5 * (x.double() @ a.T) @ b.T
    assert torch.allclose(y.double(), want, atol=1e-4)
    assert torch.equal(y[:, VOCAB:], logits[:, VOCAB:])


def test_the_base_model_slot_adds_nothing() -> None:
    lora_a, lora_b = weights(torch.float32)
    y = torch.zeros(3, PADDED)
    add_logits_lora_of_slot(y, torch.ones(3, HIDDEN), lora_a, lora_b, NO_ADAPTER, 1.0)
    assert float(y.abs().max()) == 0.0
