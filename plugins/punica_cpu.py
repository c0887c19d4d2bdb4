"""vLLM's CPU Punica wrapper, with base-model tokens kept free of every adapter.

vLLM 0.32.0's CPU LoRA path (``PunicaWrapperCPU``, torch-native SGMV/BGMV ops) picks each
token's LoRA weights by slot index, and a token of the base model has index -1, which torch
reads as the *last* slot. vLLM skips LoRA only when a whole batch has no adapter, so in a batch
that mixes base-model and adapter requests the base-model tokens were computed with whatever
adapter sat in the last slot (found by ``tests/trust/test_tenant_isolation.py``; adapter tokens
were always right). :class:`IsolatedPunicaWrapperCPU` zeroes the LoRA-A output (the shrink) of
every token without an adapter, so the expand that follows adds nothing to it; everything else
is vLLM's. :mod:`plugins.punica` installs it on the CPU platform.

Not covered: LoRA on the embedding and ``lm_head`` layers (vLLM 0.32 serves neither from PEFT
adapters of the target modules we register), which take other index paths.
"""

from __future__ import annotations

import torch
from vllm.lora.punica_wrapper.punica_cpu import PunicaWrapperCPU

#: The slot index vLLM gives a token that no adapter serves.
NO_ADAPTER = -1


def zero_tokens_without_adapter(shrunk: torch.Tensor, token_slots: torch.Tensor) -> None:
    """Set the rows of ``shrunk`` (tokens by rank) whose token has no adapter to zero."""
    rows = shrunk.size(0)
    without = token_slots[:rows] == NO_ADAPTER
    if bool(without.any()):
        shrunk[without] = 0


class IsolatedPunicaWrapperCPU(PunicaWrapperCPU):
    """vLLM's CPU wrapper whose shrink leaves base-model tokens at zero (see the module)."""

    def _shrink_prefill(
        self, y: torch.Tensor, x: torch.Tensor, w_t_all: torch.Tensor, scale: float
    ) -> None:
        super()._shrink_prefill(y, x, w_t_all, scale)
        if not self.no_lora:
            zero_tokens_without_adapter(y, self.token_lora_indices)

    def _shrink_decode(
        self, y: torch.Tensor, x: torch.Tensor, w_t_all: torch.Tensor, scale: float
    ) -> None:
        super()._shrink_decode(y, x, w_t_all, scale)
        zero_tokens_without_adapter(y, self.token_lora_indices)
