"""The logits LoRA over rows that are not the step's sampled rows (prompt log-probabilities).

vLLM's V1 model runner (0.26 on GPUs, 0.32 on CPUs) computes a request's prompt
log-probabilities (``echo`` with ``logprobs``, ``prompt_logprobs``) by running the LM head over
that request's prompt rows alone, while the Punica wrapper's sampler indices still hold one slot
per request of the step. vLLM's wrappers then map rows to adapters by position: its CPU ops raise
on the size mismatch inside the engine, which stops serving; its GPU kernels give the first rows
the adapters of the step's first requests and the other rows nothing. Either way an adapter with
LM-head weights gets wrong prompt log-probabilities, or none.

:func:`step_slot` is what both of our wrappers use instead: when every request of the step uses
one slot, the rows are that request's whoever it is, and :func:`add_logits_lora_of_slot` applies
that slot's LM-head LoRA to all of them (base-model requests: nothing). When the step mixes
slots, whose rows these are is unknown: the wrappers leave those rows at the base model's logits
and log a :data:`MIXED_STEP_WARNING` once, instead of stopping the engine (CPU) or mixing
adapters silently (GPU). Only adapters with LM-head weights are affected: without them the
logits LoRA is skipped altogether (:mod:`.logits_gate`).
"""

from __future__ import annotations

import torch

#: The slot index vLLM gives a token or request that no adapter serves.
NO_ADAPTER = -1

#: Logged once per wrapper when a mixed step's prompt rows keep the base model's logits.
MIXED_STEP_WARNING = (
    "LM-head LoRA over %d prompt rows in a step whose %d requests use different adapters: vLLM "
    "does not say whose rows these are, so their prompt log-probabilities keep the base model's "
    "LM head (sampled tokens are not affected; logged once)"
)


def step_slot(sampled: torch.Tensor) -> int | None:
    """The one slot every request of the step uses (:data:`NO_ADAPTER` for the base model), or
    ``None`` when the requests use different slots or there are none."""
    if sampled.numel() == 0 or not bool((sampled == sampled[0]).all()):
        return None
    return int(sampled[0].item())


def add_logits_lora_of_slot(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a_stacked: torch.Tensor,
    lora_b_stacked: torch.Tensor,
    slot: int,
    scale: float,
) -> None:
    """``y[:, :vocab] += scale * x @ A[slot].T @ B[slot].T`` on every row, in float32.

    ``y``: logits ``(rows, width)``, ``width`` at least the LoRA vocabulary (vLLM pads it);
    ``x``: hidden states ``(rows, hidden)``; ``lora_a_stacked``: ``(slots, 1, rank, hidden)``;
    ``lora_b_stacked``: ``(slots, 1, vocab, rank)``.
    """
    if slot == NO_ADAPTER:
        return
    a = lora_a_stacked[slot, 0].to(torch.float32)
    b = lora_b_stacked[slot, 0].to(torch.float32)
    delta = (x.to(torch.float32) @ a.T) * scale @ b.T
    vocab = b.shape[0]
    y[:, :vocab] += delta.to(y.dtype)
