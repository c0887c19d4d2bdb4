"""The logits LoRA over rows that are not the step's sampled rows (prompt log-probabilities).

vLLM's V1 model runner (0.26 on GPUs, 0.32 on CPUs) computes a request's prompt
log-probabilities (``echo`` with ``logprobs``, ``prompt_logprobs``) by running the LM head over
that request's prompt rows alone, while the Punica wrapper's sampler indices still hold one slot
per request of the step. vLLM's wrappers then map rows to adapters by position: its CPU ops raise
on the size mismatch inside the engine, which stops serving; its GPU kernels give the first rows
the adapters of the step's first requests and the other rows nothing. Either way an adapter with
LM-head weights gets wrong prompt log-probabilities, or none.

:class:`LogitsLoRA` is what both of our wrappers (CPU and GPU) do first in
``add_lora_logits``: nothing while no loaded adapter has LM-head weights (:mod:`.logits_gate`),
and for rows that are not the sampled rows, the step's one slot on all of them when every
request of the step uses it (:func:`step_slot`; the rows are that request's, whoever it is;
base-model requests: nothing). When the step mixes slots, whose rows these are is unknown: the
rows keep the base model's logits and :data:`MIXED_STEP_WARNING` is logged once, instead of
stopping the engine (CPU) or mixing adapters silently (GPU). The sampled rows stay with each
wrapper's own path. A prompt of exactly as many rows as the step has requests cannot be told
from the sampled rows and takes that path.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from .logits_gate import LogitsLoRAGate

logger = logging.getLogger(__name__)

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


class LogitsLoRA:
    """A wrapper's logits-LoRA decisions: the gate, the slots' adapters, the prompt rows."""

    def __init__(self) -> None:
        self._gate = LogitsLoRAGate()
        self._slot_ids: list[int | None] = []
        self._warned_mixed = False

    def observe(self, lora_index_to_id: Sequence[int | None]) -> None:
        """The step's adapter id per slot (``update_metadata``)."""
        self._slot_ids = list(lora_index_to_id)

    def handled(
        self,
        y: torch.Tensor,
        x: torch.Tensor,
        lora_a_stacked: torch.Tensor,
        lora_b_stacked: torch.Tensor,
        scale: float,
        sampled: torch.Tensor,
    ) -> bool:
        """True when the call is done here: skipped (no LM-head weights loaded) or applied to
        one request's prompt rows; False for the step's sampled rows (``sampled``: the
        wrapper's sampler indices), which the wrapper computes itself. Never decides on prompt
        rows inside a CUDA-graph capture (it would read a device value)."""
        if not self._gate.needed(lora_a_stacked, self._slot_ids):
            return True
        x_rows = x.reshape(-1, x.shape[-1])
        rows = x_rows.size(0)
        if rows == sampled.numel() or (x.is_cuda and torch.cuda.is_current_stream_capturing()):
            return False
        slot = step_slot(sampled)
        if slot is None:
            if not self._warned_mixed:
                self._warned_mixed = True
                logger.warning(MIXED_STEP_WARNING, rows, sampled.numel())
            return True
        y_rows = y.view(-1, y.shape[-1])
        add_logits_lora_of_slot(y_rows, x_rows, lora_a_stacked, lora_b_stacked, slot, scale)
        return True
