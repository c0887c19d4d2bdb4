"""The logits LoRA over one request's prompt rows: which slot, its delta in float32, and what a
wrapper leaves to its own path."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hi_moe_lora.kernels.prompt_logits import (  # noqa: E402
    MIXED_STEP_WARNING,
    NO_ADAPTER,
    LogitsLoRA,
    add_logits_lora_of_slot,
    step_slot,
)
from tests.support.log_records import records_of  # noqa: E402

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


def test_a_wrapper_skips_without_lm_head_weights_and_leaves_it_the_sampled_rows() -> None:
    lora_a, lora_b = weights(torch.float32)
    logits = LogitsLoRA()
    logits.observe([21, 22, None])
    x, y = torch.ones(2, HIDDEN), torch.zeros(2, PADDED)
    sampled = torch.tensor([0, 1])
    assert not logits.handled(y, x, lora_a, lora_b, 1.0, sampled)  # the wrapper's rows
    assert logits.handled(y, x, torch.zeros_like(lora_a), lora_b, 1.0, sampled)  # no LM head
    assert float(y.abs().max()) == 0.0


def test_a_wrapper_gives_prompt_rows_the_steps_slot_or_the_base_logits() -> None:
    lora_a, lora_b = weights(torch.float32)
    logits = LogitsLoRA()
    logits.observe([21, 22, None])
    x = torch.randn(6, HIDDEN, generator=torch.Generator().manual_seed(8))
    y = torch.zeros(6, PADDED)
    assert logits.handled(y, x, lora_a, lora_b, 1.0, torch.tensor([1, 1]))
    want = torch.zeros(6, PADDED)
    add_logits_lora_of_slot(want, x, lora_a, lora_b, 1, 1.0)
    assert torch.equal(y, want)
    y.zero_()
    with records_of("hi_moe_lora.kernels.prompt_logits") as records:
        for _ in range(2):
            assert logits.handled(y, x, lora_a, lora_b, 1.0, torch.tensor([0, 1]))
    assert float(y.abs().max()) == 0.0
    assert [r.getMessage() for r in records] == [MIXED_STEP_WARNING % (6, 2)]
