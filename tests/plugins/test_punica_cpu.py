"""The CPU Punica wrapper: base-model tokens of a mixed batch get no adapter's LoRA."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from vllm.lora.layers.utils import LoRAMapping  # noqa: E402
from vllm.lora.punica_wrapper.punica_cpu import PunicaWrapperCPU  # noqa: E402

from plugins.punica_cpu import IsolatedPunicaWrapperCPU, zero_tokens_without_adapter  # noqa: E402

SLOTS, RANK, HIDDEN = 3, 4, 8
#: adapter ids in slots 0, 1, 2; 0 in a mapping is the base model
SLOT_IDS = [7, 8, 9]


def weights() -> tuple[tuple[object, ...], tuple[object, ...]]:
    generator = torch.Generator().manual_seed(0)
    lora_a = (torch.randn(SLOTS, 1, RANK, HIDDEN, generator=generator),)
    lora_b = (torch.randn(SLOTS, 1, HIDDEN, RANK, generator=generator),)
    return lora_a, lora_b


def apply(wrapper_type: type, ids: tuple[int, ...], *, prefill: bool) -> tuple[object, object]:
    """``y`` after the wrapper's LoRA on tokens ``ids`` (one token per request), and ``x``."""
    lora_a, lora_b = weights()
    x = torch.randn(len(ids), HIDDEN, generator=torch.Generator().manual_seed(1))
    wrapper = wrapper_type(max_num_batched_tokens=16, max_batches=8, device="cpu")
    mapping = LoRAMapping(index_mapping=ids, prompt_mapping=ids, is_prefill=prefill)
    wrapper.update_metadata(mapping, SLOT_IDS, SLOTS + 1, 512)
    y = torch.zeros(len(ids), HIDDEN)
    wrapper.add_lora_linear(y, x, lora_a, lora_b, 1.0, (HIDDEN,))
    return y, x


def own_delta(x: object, slot: int) -> object:
    lora_a, lora_b = weights()
    return (x @ lora_a[0][slot, 0].T) @ lora_b[0][slot, 0].T  # type: ignore[operator]


@pytest.mark.parametrize("prefill", [True, False])
def test_base_model_tokens_get_nothing_and_adapter_tokens_their_own(prefill: bool) -> None:
    ids = (0, 7, 0, 9, 8, 0)
    y, x = apply(IsolatedPunicaWrapperCPU, ids, prefill=prefill)
    for row, adapter_id in enumerate(ids):
        if adapter_id == 0:
            assert float(y[row].abs().max()) == 0.0, f"base-model token {row} was changed"
        else:
            expected = own_delta(x[row], SLOT_IDS.index(adapter_id))
            assert torch.allclose(y[row], expected, atol=1e-5), f"token {row}"


def test_a_batch_of_the_base_model_alone_is_untouched() -> None:
    y, _x = apply(IsolatedPunicaWrapperCPU, (0, 0, 0), prefill=True)
    assert float(y.abs().max()) == 0.0


def test_vllms_own_cpu_wrapper_gives_base_model_tokens_the_last_slot() -> None:
    """Why the wrapper exists (vLLM 0.32.0): if this fails, vLLM fixed it and the wrapper may go."""
    y, x = apply(PunicaWrapperCPU, (0, 7), prefill=True)
    assert torch.allclose(y[0], own_delta(x[0], SLOTS - 1), atol=1e-5)


def test_zero_tokens_without_adapter_leaves_other_rows() -> None:
    shrunk = torch.ones(4, RANK)
    zero_tokens_without_adapter(shrunk, torch.tensor([0, -1, 2, -1, 5]))  # longer: padded
    assert shrunk.sum(dim=1).tolist() == [RANK, 0.0, RANK, 0.0]
