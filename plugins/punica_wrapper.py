"""hi-moe-lora's Punica wrapper: vLLM's GPU wrapper with the dense LoRA path on our kernel.

Subclasses :class:`vllm.lora.punica_wrapper.punica_gpu.PunicaWrapperGPU` and keeps everything of
it (metadata, MoE LoRA, ``apply_lora_full_linear``) except ``add_lora_linear``, which every
LoRA-wrapped linear layer calls (qkv, o, gate_up, down; fully sharded TP layers excepted): one
``hi_moe_lora::lora_linear`` launch per layer instead of vLLM's memset + shrink + expand.

Kept from vLLM on purpose:
- ``add_shrink`` / ``add_expand``: called only by the fully sharded (TP) layers, which
  all-reduce the rank-sized intermediate between the two halves, so they cannot fuse;
- ``add_lora_logits``: one call per step on the sampled rows only, against a vocab-wide B;
  skipped when no loaded adapter has LM-head weights (:mod:`hi_moe_lora.kernels.logits_gate`),
  since vLLM would otherwise run it on all-zero weights every step. A call over one request's
  prompt rows (prompt log-probabilities), which vLLM's kernels map to the wrong adapters, takes
  :mod:`hi_moe_lora.kernels.prompt_logits` instead;
- ``add_lora_embedding``: an expand-only gather, no shrink to fuse.

Per step (``update_metadata``, eager, before the forward) the wrapper rebuilds the work list in
its persistent buffers and refreshes the real ranks of the slots whose adapter changed, and
their narrow copies of B (:mod:`hi_moe_lora.kernels.narrow_b`; ``HI_MOE_LORA_NARROW_B``).

DoRA (:mod:`plugins.dora`): a layer that may serve DoRA adapters passes its scale table and
per-slot flags as ``dora_scales`` / ``dora_live``; the kernel applies ``g * (y + delta)`` to DoRA
slots' tokens in its epilogue (``supports_dora``). They are plain arguments, so torch.compile
traces them like the rest (a lookup keyed by a tensor's address would break its graph).

:class:`ReferencePunicaWrapperGPU` (``HI_MOE_LORA_KERNELS=reference``) is the in-vLLM reference
for correctness probes: the same dense path in float64
(:mod:`hi_moe_lora.kernels.reference_op`), slow.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from vllm.lora.punica_wrapper.punica_gpu import PunicaWrapperGPU

import hi_moe_lora.kernels.ops
import hi_moe_lora.kernels.reference_op  # noqa: F401  (registers ...lora_linear_float64)
from hi_moe_lora.kernels.config import BLOCK_M_LARGE, BLOCK_M_SMALL
from hi_moe_lora.kernels.prompt_logits import LogitsLoRA
from hi_moe_lora.kernels.ranks import SlotRanks
from hi_moe_lora.kernels.worklist import MAX_SLICES, WorkListBuffers, token_slots_from_mapping
from plugins.settings import PluginSettings, PluginSettingsError

logger = logging.getLogger(__name__)


def _narrow_b_setting() -> bool:
    """``HI_MOE_LORA_NARROW_B`` (on unless the plugin's settings say off or cannot be read:
    the plugin's registration has already warned about a malformed value)."""
    try:
        return PluginSettings.from_env().narrow_b
    except PluginSettingsError:
        return True


class HiMoePunicaWrapperGPU(PunicaWrapperGPU):  # type: ignore[misc]
    """vLLM's GPU Punica wrapper whose dense LoRA linear runs on the fused kernel."""

    #: ``add_lora_linear`` takes ``dora_scales`` and ``dora_live`` (:mod:`plugins.dora`).
    supports_dora = True

    def __init__(
        self,
        max_num_batched_tokens: int,
        max_batches: int,
        device: torch.device | str,
        **kwargs: Any,
    ) -> None:
        super().__init__(max_num_batched_tokens, max_batches, device, **kwargs)
        lora_config = kwargs["lora_config"]
        num_slots = int(lora_config.max_loras)
        self._hm_work = WorkListBuffers(max_num_batched_tokens, num_slots, device)
        narrow_b = _narrow_b_setting()
        self._hm_ranks = SlotRanks(
            num_slots, int(lora_config.max_lora_rank), device, narrow_b=narrow_b
        )
        self._hm_logits = LogitsLoRA()
        logger.info(
            "hi-moe-lora fused LoRA kernels active (%d slots, max rank %d, narrow B copies %s)",
            num_slots,
            int(lora_config.max_lora_rank),
            "on" if narrow_b else "off",
        )

    def update_metadata(
        self,
        mapping: Any,
        lora_index_to_id: list[int | None],
        max_loras: int,
        vocab_size: int,
        **kwargs: Any,
    ) -> None:
        super().update_metadata(mapping, lora_index_to_id, max_loras, vocab_size, **kwargs)
        self._hm_logits.observe(lora_index_to_id)
        ranks = self._hm_ranks.refresh(lora_index_to_id)
        slots = token_slots_from_mapping(mapping.index_mapping, lora_index_to_id)
        self._hm_work.update(slots, ranks)

    def add_lora_logits(
        self,
        y: torch.Tensor,
        x: torch.Tensor,
        lora_a_stacked: torch.Tensor,
        lora_b_stacked: torch.Tensor,
        scale: float,
        *,
        buffer: Any = None,
        **kwargs: Any,
    ) -> Any:
        sampled = self.sampler_indices
        if self._hm_logits.handled(y, x, lora_a_stacked, lora_b_stacked, scale, sampled):
            return y
        return super().add_lora_logits(
            y, x, lora_a_stacked, lora_b_stacked, scale, buffer=buffer, **kwargs
        )

    def add_lora_linear(
        self,
        y: torch.Tensor,
        x: torch.Tensor,
        lora_a_stacked: tuple[torch.Tensor, ...],
        lora_b_stacked: tuple[torch.Tensor, ...],
        scale: float,
        output_slices: tuple[int, ...],
        *,
        buffer: Any = None,
        **kwargs: Any,
    ) -> None:
        if buffer is not None or not 1 <= len(lora_a_stacked) <= MAX_SLICES:
            super().add_lora_linear(
                y,
                x,
                lora_a_stacked,
                lora_b_stacked,
                scale,
                output_slices,
                buffer=buffer,
                **kwargs,
            )
            return
        add_inputs = bool(kwargs.pop("add_inputs", True))
        scales = kwargs.pop("dora_scales", None)
        live = kwargs.pop("dora_live", None)
        torch.ops.hi_moe_lora.lora_linear(
            y.view(-1, y.shape[-1]),
            x.view(-1, x.shape[-1]),
            list(lora_a_stacked),
            list(lora_b_stacked),
            self._hm_work.tiles[BLOCK_M_SMALL],
            self._hm_work.tiles[BLOCK_M_LARGE],
            self._hm_ranks.ranks,
            self._hm_work.counters,
            self.token_mapping_meta.no_lora_flag_cpu,
            float(scale),
            0,
            add_inputs,
            scales,
            live,
        )


class ReferencePunicaWrapperGPU(PunicaWrapperGPU):  # type: ignore[misc]
    """vLLM's GPU Punica wrapper whose dense LoRA linear is computed in float64 (probes only)."""

    #: ``add_lora_linear`` takes ``dora_scales`` and ``dora_live`` (:mod:`plugins.dora`).
    supports_dora = True

    def __init__(
        self,
        max_num_batched_tokens: int,
        max_batches: int,
        device: torch.device | str,
        **kwargs: Any,
    ) -> None:
        super().__init__(max_num_batched_tokens, max_batches, device, **kwargs)
        logger.warning(
            "hi-moe-lora float64 reference LoRA active: for correctness probes, not for serving"
        )

    def add_lora_linear(
        self,
        y: torch.Tensor,
        x: torch.Tensor,
        lora_a_stacked: tuple[torch.Tensor, ...],
        lora_b_stacked: tuple[torch.Tensor, ...],
        scale: float,
        output_slices: tuple[int, ...],
        *,
        buffer: Any = None,
        **kwargs: Any,
    ) -> None:
        if buffer is not None:
            super().add_lora_linear(
                y,
                x,
                lora_a_stacked,
                lora_b_stacked,
                scale,
                output_slices,
                buffer=buffer,
                **kwargs,
            )
            return
        meta = self.token_mapping_meta
        scales = kwargs.pop("dora_scales", None)
        live = kwargs.pop("dora_live", None)
        torch.ops.hi_moe_lora.lora_linear_float64(
            y.view(-1, y.shape[-1]),
            x.view(-1, x.shape[-1]),
            list(lora_a_stacked),
            list(lora_b_stacked),
            meta.token_lora_mapping,
            meta.no_lora_flag_cpu,
            float(scale),
            0,
            bool(kwargs.pop("add_inputs", True)),
            scales,
            live,
        )
