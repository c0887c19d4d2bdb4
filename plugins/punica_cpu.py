"""vLLM's CPU Punica wrapper, with base-model tokens kept free of every adapter.

vLLM 0.32.0's CPU LoRA path (``PunicaWrapperCPU``, torch-native SGMV/BGMV ops) picks each
token's LoRA weights by slot index, and a token of the base model has index -1, which torch
reads as the *last* slot. vLLM skips LoRA only when a whole batch has no adapter, so in a batch
that mixes base-model and adapter requests the base-model tokens were computed with whatever
adapter sat in the last slot (found by ``tests/trust/test_tenant_isolation.py``; adapter tokens
were always right). :class:`IsolatedPunicaWrapperCPU` zeroes the LoRA-A output (the shrink) of
every token without an adapter, so the expand that follows adds nothing to it; everything else
is vLLM's. :mod:`plugins.punica` installs it on the CPU platform.

It also keeps a prompt-logprobs request from killing the engine. vLLM computes a request's
prompt log-probabilities (``echo`` with ``logprobs``, ``prompt_logprobs``) by running the LM
head over that request's prompt rows alone, and its CPU ``add_lora_logits`` indexes those rows
with the step's per-request sampler indices: with other requests running, the sizes differ and
the einsum raises inside the engine, which then stops serving everyone (found by
``benchmarks/kernels/gpu_churn.py`` on the CPU build). Ours
(:meth:`IsolatedPunicaWrapperCPU.add_lora_logits`):

- skips the logits LoRA while no loaded adapter has LM-head weights (exact: the skipped delta is
  zero; the GPU wrapper's gate, :mod:`hi_moe_lora.kernels.logits_gate`);
- gives the sampled rows of base-model requests no adapter, as the shrink above does;
- handles rows that are not the sampled rows as the GPU wrapper does
  (:mod:`hi_moe_lora.kernels.prompt_logits`): the step's one adapter on all of them, or, in a
  step that mixes adapters while LM-head weights are loaded, the base model's logits and a
  warning (whose rows these are is unknown there).

Not covered: LoRA on the embedding layer (vLLM 0.32 serves none from PEFT adapters of the
target modules we register), which takes other index paths.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.lora.ops.torch_ops import bgmv_expand, bgmv_shrink
from vllm.lora.punica_wrapper.punica_cpu import PunicaWrapperCPU

from hi_moe_lora.kernels.prompt_logits import NO_ADAPTER, LogitsLoRA


def zero_tokens_without_adapter(shrunk: torch.Tensor, token_slots: torch.Tensor) -> None:
    """Set the rows of ``shrunk`` (tokens by rank) whose token has no adapter to zero."""
    rows = shrunk.size(0)
    without = token_slots[:rows] == NO_ADAPTER
    if bool(without.any()):
        shrunk[without] = 0


class IsolatedPunicaWrapperCPU(PunicaWrapperCPU):
    """vLLM's CPU wrapper whose shrink leaves base-model tokens at zero and whose logits LoRA
    survives prompt log-probabilities (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hm_logits = LogitsLoRA()

    def update_metadata(
        self, mapping: Any, lora_index_to_id: list[int | None], *args: Any, **kwargs: Any
    ) -> None:
        super().update_metadata(mapping, lora_index_to_id, *args, **kwargs)
        self._hm_logits.observe(lora_index_to_id)

    def add_lora_logits(
        self,
        y: torch.Tensor,
        x: torch.Tensor,
        lora_a_stacked: torch.Tensor,
        lora_b_stacked: torch.Tensor,
        scale: float,
        *,
        buffer: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> None:
        """vLLM's logits LoRA, in place on ``y`` (see the module for what differs)."""
        sampled = self.sampler_indices
        if self._hm_logits.handled(y, x, lora_a_stacked, lora_b_stacked, scale, sampled):
            return
        if bool((sampled == NO_ADAPTER).all()):
            return
        x_rows = x.reshape(-1, x.shape[-1])
        shrunk = torch.zeros((x_rows.size(0), lora_b_stacked.size(-1)), dtype=torch.float32)
        bgmv_shrink(x_rows, lora_a_stacked, shrunk, sampled, scale)
        zero_tokens_without_adapter(shrunk, sampled)
        bgmv_expand(shrunk, lora_b_stacked, y.view(-1, y.shape[-1]), sampled, add_inputs=True)

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
