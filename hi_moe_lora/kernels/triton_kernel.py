"""Launching the fused multi-LoRA Triton kernel (:mod:`hi_moe_lora.kernels.fused`): the entry
point, and compiling a layer's prefill-sized variants before serving meets them. A layer's
checks and launch arguments are worked out on its first call (:mod:`.launch_plan`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import torch

from .config import PREFILL_BUCKETS, TileConfig
from .fused.flavours import compiled_kernel
from .launch_plan import LayerLaunch, layer_launch, variant_cache
from .layout import DoraEpilogue, FusedLoRAShapeError

__all__ = [
    "DoraEpilogue",
    "FusedLoRAShapeError",
    "launch_fused_lora",
    "precompile_prefill_variants",
]

logger = logging.getLogger(__name__)


def launch_fused_lora(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    lora_b: Sequence[torch.Tensor],
    tiles_by_block_m: dict[int, torch.Tensor],
    counters: torch.Tensor,
    scale: float,
    offset_start: int = 0,
    add_inputs: bool = True,
    config: TileConfig | None = None,
    max_programs: int | None = None,
    min_rank: int = 0,
    reduce_in_expand: bool | None = None,
    wide_reduce_in_expand: bool | None = None,
    wide_split_jobs: int | None = None,
    dora: DoraEpilogue | None = None,
    narrow_b: Sequence[torch.Tensor] | None = None,
) -> TileConfig:
    """Launch the kernel once for all slices; returns the tile configuration it used.

    ``counters`` is the zeroed int32 buffer of :class:`.worklist.WorkListBuffers` (left zeroed).
    Every adapter runs at least at ``min_rank`` (the full rank while ranks are stale).
    ``reduce_in_expand`` and ``wide_reduce_in_expand`` override the choice of reduction for
    narrow and wide tiles, ``wide_split_jobs`` the most jobs for which wide tiles are split
    (default: :data:`.config.WIDE_SPLIT_WAVES` waves of the launch's programs; tests and tuning).
    On a GPU, the first call for a layer shape also compiles the prefill-sized variants it has
    not met yet (see :func:`precompile_prefill_variants`). ``dora``: the layer's DoRA scales,
    applied in the expand jobs' epilogue (:class:`DoraEpilogue`).

    B may be stored at a lower rank than A (``(slots, out, r_b)`` beside ``(slots, r_a, in)``,
    ``r_b <= r_a``, the same in every slice): the rank columns it lacks count as zero. vLLM's
    buffers store both at ``max_lora_rank``; a B kept at the adapters' real rank is read in whole
    rows (``benchmarks/kernels/ab_kernels.py``'s ``/64b16`` cases time that layout).
    ``narrow_b``: B's narrow copies (:mod:`.narrow_b`: each slot's first ``RANK_CHUNK`` rank
    columns, ``(slots, out, RANK_CHUNK)`` per slice), read by the tiles of adapters of rank at
    most ``RANK_CHUNK`` instead of B; they must hold B's values there. None: B itself.
    """
    layer = layer_launch(y, x, lora_a, lora_b, counters, offset_start, add_inputs, dora, narrow_b)
    if x.is_cuda and config is None and not layer.precompiled:
        precompile_prefill_variants(layer, y, x, tiles_by_block_m)
    return layer.launch(
        y, x, tiles_by_block_m, scale, min_rank, x.shape[0], config=config,
        max_programs=max_programs, reductions=(reduce_in_expand, wide_reduce_in_expand),
        split_jobs=wide_split_jobs,
    )  # fmt: skip


#: Layers (by weights' address and layout) whose prefill-sized variants are compiled.
_PRECOMPILED: set[tuple[object, ...]] = set()


def precompile_prefill_variants(
    layer: LayerLaunch,
    y: torch.Tensor,
    x: torch.Tensor,
    tiles_by_block_m: dict[int, torch.Tensor],
) -> int:
    """Compile, without running, the kernel for every prefill token bucket of this layer.

    vLLM compiles what its start-up meets: the profile run (the largest batch) and the CUDA
    graph sizes. A prefill chunk of another bucket would otherwise compile its variant in the
    middle of serving (seconds, every request of the step waiting). Checked once per layer,
    keyed by its weights' address and layout (the caching allocator hands a freed address to
    new weights, possibly of another shape); layers of one shape and specialisation share the
    compiled variants, so only the first of them compiles. Returns the number of variants
    compiled now.
    """
    layer.precompiled = True
    key = _layer_key(x, layer.a, layer.b, layer.add_inputs, layer.dora is not None)
    if key in _PRECOMPILED:
        return 0
    _PRECOMPILED.add(key)
    variants = variant_cache(compiled_kernel())
    before = len(variants) if variants is not None else 0
    began = time.perf_counter()
    for bucket in PREFILL_BUCKETS:
        layer.launch(y, x, tiles_by_block_m, 1.0, 0, bucket, compile_only=True)
    compiled = len(variants) - before if variants is not None else len(PREFILL_BUCKETS)
    if compiled:
        logger.info(
            "fused LoRA kernel: %d prefill variants for K=%d N=%s compiled in %.1f s",
            compiled,
            x.shape[1],
            list(layer.widths),
            time.perf_counter() - began,
        )
    return compiled


def _layer_key(
    x: torch.Tensor,
    a: list[torch.Tensor],
    b: list[torch.Tensor],
    add_inputs: bool,
    dora: bool = False,
) -> tuple[object, ...]:
    """What identifies a layer's launches for the precompile: its weights' address and layout
    (an address alone is reused by the caching allocator for weights of another shape)."""
    return (
        x.device.index or 0,
        a[0].data_ptr(),
        a[0].shape,
        a[0].dtype,
        tuple(t.shape[1] for t in b),
        add_inputs,
        dora,
    )
