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

With ``HI_MOE_LORA_FUSED_GEMM`` on (``auto``: a GPU with measured tiles),
:meth:`HiMoePunicaWrapperGPU.base_and_lora_linear` also serves a LoRA layer's base GEMM
(:mod:`plugins.fused_gemm` routes vLLM's layers to it): the ``hi_moe_lora::gemm_lora_linear``
op, which carries a one-adapter step's LoRA in the GEMM at decode sizes (several adapters: the
split form where the tile plan says so, a shrink launch then the expand in the GEMM's epilogue,
else our launch after the GEMM). Under vLLM's ``--specialize-active-lora`` it reads the count of
active adapters vLLM captured the graph for.

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
from vllm.model_executor.layers.linear import UnquantizedLinearMethod

import hi_moe_lora.kernels.gemm_op  # (registers hi_moe_lora::gemm_lora_linear)
import hi_moe_lora.kernels.ops
import hi_moe_lora.kernels.reference_op  # noqa: F401  (registers ...lora_linear_float64)
from hi_moe_lora.kernels.config import BLOCK_M_LARGE, BLOCK_M_SMALL
from hi_moe_lora.kernels.gemm_lora import FUSED_GEMM_ROWS
from hi_moe_lora.kernels.prompt_logits import LogitsLoRA
from hi_moe_lora.kernels.ranks import SlotRanks
from hi_moe_lora.kernels.worklist import MAX_SLICES, WorkListBuffers, token_slots_from_mapping
from plugins.dora import LIVE_FLAGS, SCALE_TABLE
from plugins.fused_gemm import enabled as fused_gemm_enabled
from plugins.fused_gemm import specialization_advice
from plugins.settings import PluginSettings

logger = logging.getLogger(__name__)


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
        settings = PluginSettings.from_env_or_defaults()
        narrow_b, fused_gemm = settings.narrow_b, fused_gemm_enabled(settings.fused_gemm)
        self._hm_work = WorkListBuffers(
            max_num_batched_tokens, num_slots, device, fused_slot=fused_gemm
        )
        self._hm_ranks = SlotRanks(
            num_slots, int(lora_config.max_lora_rank), device, narrow_b=narrow_b
        )
        self._hm_logits = LogitsLoRA()
        logger.info(
            "hi-moe-lora fused LoRA kernels active (%d slots, max rank %d, narrow B copies %s, "
            "LoRA in the base GEMM %s)",
            num_slots,
            int(lora_config.max_lora_rank),
            "on" if narrow_b else "off",
            "on" if fused_gemm else "off",
        )
        advice = specialization_advice(
            fused_gemm, bool(getattr(lora_config, "specialize_active_lora", False))
        )
        if advice is not None:
            logger.info("%s", advice)

    def compile_slot_refresh(self) -> None:
        """Inside the kernel warm-up's compiling block: compile the kernels that refresh a
        slot's rank and narrow copies when an adapter enters it (:meth:`SlotRanks
        .compile_refresh`), for the stacks this wrapper's ops have seen."""
        self._hm_ranks.compile_refresh()

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

    def base_and_lora_linear(
        self, layer: Any, x: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor | None:
        """A LoRA layer's whole output (base GEMM and LoRA, one op) when the fused GEMM is on
        and the layer's base is an unquantized matrix without bias; None: vLLM's own path."""
        work = self._hm_work
        if work.fused_slot is None or work.gemm_arrivals is None or bias is not None:
            return None
        if x.dim() != 2:
            return None
        base: Any = getattr(layer, "base_layer", None)
        if type(getattr(base, "quant_method", None)) is not UnquantizedLinearMethod:
            return None
        weight = base.weight
        lora_a, lora_b = layer.lora_a_stacked, layer.lora_b_stacked
        if weight.dim() != 2 or not 1 <= len(lora_a) <= MAX_SLICES:
            return None
        meta = self.token_mapping_meta
        y = torch.empty(x.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)
        torch.ops.hi_moe_lora.gemm_lora_linear(
            y, x, weight, list(lora_a), list(lora_b),
            work.tiles[BLOCK_M_SMALL], work.tiles[BLOCK_M_LARGE],
            work.rest_tiles[BLOCK_M_SMALL], work.rest_tiles[BLOCK_M_LARGE],
            meta.token_lora_mapping, work.fused_slot, self._hm_ranks.ranks, work.counters,
            work.gemm_arrivals, meta.no_lora_flag_cpu, 1.0, FUSED_GEMM_ROWS[0], FUSED_GEMM_ROWS[1],
            meta.num_active_loras_cpu, bool(self.lora_config.specialize_active_lora),
            getattr(layer, SCALE_TABLE, None), getattr(layer, LIVE_FLAGS, None),
        )  # fmt: skip
        return y

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
