"""Whether a step needs the logits LoRA at all.

vLLM wraps the LM head of every LoRA-enabled model and runs its shrink and expand kernels on the
sampled rows every step, against a vocabulary-wide ``B``, even when no loaded adapter has LM-head
weights (the common case: adapters target the attention and MLP projections) and the stacked
weights are all zero. On an H100 that dead work costs 30 µs a step with one adapter and up to
240 µs with 16 (vLLM 0.26, Llama-3-8B shapes, measured in a served step).

:class:`LogitsLoRAGate` answers per step: the logits LoRA is needed when a loaded adapter has a
non-zero LM-head ``A``. A slot's answer is computed once per adapter that lands in it (one small
device reduction and a host read) and cached; skipping is exact, since the skipped delta is
zero. Inside a CUDA-graph capture the gate always answers "needed", so a captured graph never
bakes a skip in.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .ranks import detect_rank


class LogitsLoRAGate:
    """Per LM-head stacked ``A``: which slots' adapters carry LM-head weights."""

    def __init__(self) -> None:
        self._slots: dict[int, dict[int, tuple[int, bool]]] = {}

    def needed(self, lora_a_stacked: torch.Tensor, lora_index_to_id: Sequence[int | None]) -> bool:
        """True unless every loaded adapter's LM-head ``A`` is all zero."""
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return True
        known = self._slots.setdefault(lora_a_stacked.data_ptr(), {})
        slots = min(len(lora_index_to_id), lora_a_stacked.shape[0])
        for slot in range(slots):
            lora_id = lora_index_to_id[slot]
            if lora_id is None or lora_id <= 0:
                continue
            cached = known.get(slot)
            if cached is None or cached[0] != lora_id:
                cached = (lora_id, int(detect_rank(lora_a_stacked, slot).item()) > 0)
                known[slot] = cached
            if cached[1]:
                return True
        return False
