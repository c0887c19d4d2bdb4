"""Launching the fused multi-LoRA Triton kernel (:mod:`hi_moe_lora.kernels.fused`): layout
checks, the tile configuration and grid of a call, the scratch buffers, and compiling a layer's
prefill-sized variants before serving meets them.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .config import (
    PREFILL_BUCKETS,
    RANK_CHUNK,
    WIDE_SPLIT_WAVES,
    KernelConfigError,
    TileConfig,
    choose_config,
)
from .fused.flavours import compiled_kernel, interpreted_kernel
from .reference_loops import stacked_view
from .worklist import (
    HEADER_SIZE,
    MAX_SLICES,
    pairs_in_counters,
    record_size,
    upper_bound_tiles,
)

logger = logging.getLogger(__name__)

#: Programs per SM: enough to hide latency, few enough that idle programs cost one wave.
PROGRAMS_PER_SM = 2


class FusedLoRAShapeError(ValueError):
    """The stacked weights or activations do not have the layout the kernel needs."""


@dataclass(frozen=True)
class DoraEpilogue:
    """A layer's DoRA scales, applied by the kernel as ``y = g * (y + delta)``.

    ``scales``: float32 ``[rows, width]``, a row per slot (more rows are ignored), a column per
    output column of the layer (``y``'s, from its first); ``live``: int32 ``[slots]``, non-zero
    where the slot holds a DoRA adapter (other slots' tokens are not scaled). Both persistent,
    so a captured CUDA graph reads what activation last wrote into them.
    """

    scales: torch.Tensor
    live: torch.Tensor

    def check(self, y: torch.Tensor, n_slots: int, offset_start: int, add_inputs: bool) -> None:
        if not add_inputs or offset_start != 0:
            raise FusedLoRAShapeError("the DoRA epilogue needs add_inputs and offset_start 0")
        scales, live = self.scales, self.live
        if scales.dtype != torch.float32 or scales.dim() != 2 or scales.stride(1) != 1:
            raise FusedLoRAShapeError("DoRA scales must be a float32 matrix, rows contiguous")
        if scales.shape[0] < n_slots or scales.shape[1] != y.shape[1]:
            raise FusedLoRAShapeError(
                f"DoRA scales {tuple(scales.shape)} do not cover {n_slots} slots x {y.shape[1]}"
            )
        if live.dtype != torch.int32 or live.dim() != 1 or live.numel() < n_slots:
            raise FusedLoRAShapeError(f"DoRA flags must be int32 with {n_slots} entries")
        if scales.device != y.device or live.device != y.device:
            raise FusedLoRAShapeError("DoRA scales and flags must be on the output's device")


@functools.cache
def _num_sms(device_index: int) -> int:
    return int(torch.cuda.get_device_properties(device_index).multi_processor_count)


def _check_layout(
    x: torch.Tensor, y: torch.Tensor, a: list[torch.Tensor], b: list[torch.Tensor]
) -> None:
    if not 1 <= len(a) <= MAX_SLICES or len(a) != len(b):
        raise FusedLoRAShapeError(f"need 1..{MAX_SLICES} slices with A and B, got {len(a)}")
    if x.dim() != 2 or y.dim() != 2:
        raise FusedLoRAShapeError("x and y must be 2-D (tokens, features)")
    if x.shape[0] != y.shape[0]:
        raise FusedLoRAShapeError(f"x has {x.shape[0]} rows, y has {y.shape[0]}")
    first = a[0]
    b_rank = b[0].shape[2]  # B's stored rank: the kernel takes one row stride for every slice
    for a_s, b_s in zip(a, b, strict=True):
        if a_s.shape != first.shape or a_s.dtype != first.dtype or b_s.dtype != first.dtype:
            raise FusedLoRAShapeError("all slices' A must share shape and dtype with B")
        if not (a_s.is_contiguous() and b_s.is_contiguous()):
            raise FusedLoRAShapeError("stacked LoRA weights must be contiguous")
        if b_s.shape[0] != a_s.shape[0] or not 1 <= b_s.shape[2] <= a_s.shape[1]:
            raise FusedLoRAShapeError(
                f"B {tuple(b_s.shape)} does not match A {tuple(a_s.shape)} (slots; B's stored "
                "rank at most A's)"
            )
        if b_s.shape[2] != b_rank:
            raise FusedLoRAShapeError(
                f"B is stored at rank {b_s.shape[2]} in one slice and {b_rank} in another"
            )
    if first.shape[2] != x.shape[1]:
        raise FusedLoRAShapeError(f"A takes {first.shape[2]} inputs, x has {x.shape[1]}")


def _check_narrow_b(b: list[torch.Tensor], narrow_b: list[torch.Tensor]) -> None:
    """Narrow copies: one per slice, B's slots and rows, ``RANK_CHUNK`` rank columns."""
    if len(narrow_b) != len(b):
        raise FusedLoRAShapeError(f"{len(narrow_b)} narrow B copies for {len(b)} slices")
    for b_s, nb_s in zip(b, narrow_b, strict=True):
        want = (b_s.shape[0], b_s.shape[1], RANK_CHUNK)
        if tuple(nb_s.shape) != want or nb_s.dtype != b_s.dtype or not nb_s.is_contiguous():
            raise FusedLoRAShapeError(
                f"narrow B copy {tuple(nb_s.shape)} {nb_s.dtype} is not a contiguous {want} "
                f"{b_s.dtype} (B {tuple(b_s.shape)})"
            )
        if nb_s.device != b_s.device:
            raise FusedLoRAShapeError("narrow B copies must be on B's device")


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
    a = [stacked_view(t) for t in lora_a]
    b = [stacked_view(t) for t in lora_b]
    _check_layout(x, y, a, b)
    nb = b
    if narrow_b is not None:
        nb = [stacked_view(t) for t in narrow_b]
        _check_narrow_b(b, nb)
    widths = [t.shape[1] for t in b]
    if offset_start + sum(widths) > y.shape[1]:
        raise FusedLoRAShapeError(f"slices end at {offset_start + sum(widths)} > {y.shape[1]}")
    if dora is not None:
        dora.check(y, a[0].shape[0], offset_start, add_inputs)
    if x.is_cuda and config is None:
        precompile_prefill_variants(
            y, x, a, b, tiles_by_block_m, counters, add_inputs, dora, narrow_b=nb
        )
    return _launch(
        y, x, a, (b, nb), tiles_by_block_m, counters, scale, offset_start, add_inputs, config,
        max_programs, min_rank, (reduce_in_expand, wide_reduce_in_expand), wide_split_jobs,
        x.shape[0], compile_only=False, dora=dora,
    )  # fmt: skip


#: Layers (by weights' address and layout) whose prefill-sized variants are compiled.
_PRECOMPILED: set[tuple[object, ...]] = set()


def precompile_prefill_variants(
    y: torch.Tensor,
    x: torch.Tensor,
    a: list[torch.Tensor],
    b: list[torch.Tensor],
    tiles_by_block_m: dict[int, torch.Tensor],
    counters: torch.Tensor,
    add_inputs: bool,
    dora: DoraEpilogue | None = None,
    narrow_b: list[torch.Tensor] | None = None,
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
    key = _layer_key(x, a, b, add_inputs, dora is not None)
    if key in _PRECOMPILED:
        return 0
    _PRECOMPILED.add(key)
    variants = _variant_cache(compiled_kernel())
    before = len(variants) if variants is not None else 0
    began = time.perf_counter()
    for bucket in PREFILL_BUCKETS:
        _launch(
            y, x, a, (b, narrow_b or b), tiles_by_block_m, counters, 1.0, 0, add_inputs, None,
            None, 0,
            (None, None), None, bucket, compile_only=True, dora=dora,
        )  # fmt: skip
    compiled = len(variants) - before if variants is not None else len(PREFILL_BUCKETS)
    if compiled:
        logger.info(
            "fused LoRA kernel: %d prefill variants for K=%d N=%s compiled in %.1f s",
            compiled,
            x.shape[1],
            [t.shape[1] for t in b],
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


def _variant_cache(kernel: Any) -> dict[str, Any] | None:
    """Triton's compiled variants of ``kernel`` for the current device, by key (None if the
    Triton version keeps them elsewhere)."""
    caches = getattr(kernel, "device_caches", None)
    if caches is None:
        return None
    cache: dict[str, Any] = caches[torch.cuda.current_device()][0]
    return cache


def _launch(
    y: torch.Tensor,
    x: torch.Tensor,
    a: list[torch.Tensor],
    b_and_narrow: tuple[list[torch.Tensor], list[torch.Tensor]],
    tiles_by_block_m: dict[int, torch.Tensor],
    counters: torch.Tensor,
    scale: float,
    offset_start: int,
    add_inputs: bool,
    config: TileConfig | None,
    max_programs: int | None,
    min_rank: int,
    reductions: tuple[bool | None, bool | None],
    split_jobs: int | None,
    m: int,
    *,
    compile_only: bool,
    dora: DoraEpilogue | None = None,
) -> TileConfig:
    """Launch (or, with ``compile_only``, only compile) the kernel configured for ``m`` rows.

    ``reductions``: whether narrow and wide tiles reduce in the expand jobs; ``split_jobs``:
    the most jobs for which wide tiles are split (None: the defaults); ``b_and_narrow``: B and
    what the narrow tiles read (B again, or its narrow copies)."""
    b, nb = b_and_narrow
    widths = [t.shape[1] for t in b]
    on_gpu = x.is_cuda
    num_sms = _num_sms(x.device.index or 0) if on_gpu else 4
    n_slots = a[0].shape[0]
    cfg = config or choose_config(m, x.shape[1], sum(widths), a[0].shape[1], num_sms, n_slots)
    tiles = tiles_by_block_m[cfg.block_m]
    k_split = cfg.k_split(x.shape[1])
    if cfg.rank_pad < a[0].shape[1]:
        raise FusedLoRAShapeError(f"padded rank {cfg.rank_pad} < stacked rank {a[0].shape[1]}")
    try:
        cfg.check()
    except KernelConfigError as exc:
        raise FusedLoRAShapeError(str(exc)) from exc
    tiles_ub = min(
        upper_bound_tiles(x.shape[0], n_slots, cfg.block_m),
        (tiles.numel() - HEADER_SIZE) // record_size(cfg.block_m),
    )
    pair_cap = pairs_in_counters(counters.numel())
    if tiles_ub * len(a) > pair_cap:
        raise FusedLoRAShapeError(f"{tiles_ub * len(a)} tile pairs > counter capacity {pair_cap}")
    # Most jobs: every tile wide when there is a wide path (a wide tile has the most jobs).
    wide = cfg.rank_pad > cfg.block_r
    jobs_per_tile = len(a) * k_split * (cfg.wide_split if wide else 1)
    jobs_ub = tiles_ub * (jobs_per_tile + cfg.expand_jobs(widths, wide=wide))
    cap = max_programs if max_programs is not None else (num_sms * PROGRAMS_PER_SM)
    grid = (max(1, min(jobs_ub, cap)),)
    if split_jobs is None:
        split_jobs = WIDE_SPLIT_WAVES * grid[0]
    tile_elems = cfg.block_m * cfg.rank_pad
    reduce_narrow = reductions[0]
    if reduce_narrow is None:
        reduce_narrow = cfg.reduces_in_expand(x.shape[1], widths)
    reduce_wide = reductions[1]
    if reduce_wide is None:
        reduce_wide = cfg.reduces_in_expand(x.shape[1], widths, wide=True)
    part = torch.empty(
        tiles_ub * len(a) * k_split * tile_elems, dtype=torch.float32, device=x.device
    )
    inter = torch.empty(tiles_ub * len(a) * tile_elems, dtype=a[0].dtype, device=x.device)
    # One pointer per slice (absent slices repeat the first): offsets between the slices'
    # tensors would be typed i32 or i64 by their value, and so multiply compiled variants.
    a_slices = [*a, a[0], a[0]][:MAX_SLICES]
    b_slices = [*b, b[0], b[0]][:MAX_SLICES]
    nb_slices = [*nb, nb[0], nb[0]][:MAX_SLICES]
    ns = [*widths, 0, 0]
    # Without DoRA the epilogue is compiled out; its pointers are placeholders of the same types.
    dora_args = (
        (part, counters, 0) if dora is None else (dora.scales, dora.live, dora.scales.stride(0))
    )
    kernel = compiled_kernel() if on_gpu else interpreted_kernel()
    variants = _variant_cache(kernel) if on_gpu else None
    known = len(variants) if variants is not None and not compile_only else None
    run = functools.partial(kernel.warmup, grid=grid) if compile_only else kernel[grid]
    run(
        x,
        y,
        *a_slices,
        *b_slices,
        *nb_slices,
        tiles,
        part,
        inter,
        counters,
        ns[0],
        ns[1],
        ns[2],
        x.shape[0],
        x.shape[1],
        x.stride(0),
        x.stride(1),
        y.stride(0),
        y.stride(1),
        a[0].stride(0),
        a[0].stride(1),
        b[0].stride(1),
        nb[0].stride(1),
        offset_start,
        pair_cap,
        int(min_rank),
        int(split_jobs),
        float(scale),
        *dora_args,
        NUM_SLICES=len(a),
        K_SPLIT=k_split,
        K_ITERS=cfg.k_iters,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        BLOCK_R=cfg.block_r,
        RANK_PAD=cfg.rank_pad,
        WIDE_SPLIT=cfg.wide_split,
        N_GROUP=cfg.n_group,
        WIDE_K_STEPS=cfg.wide_k_steps,
        REDUCE_IN_EXPAND=bool(reduce_narrow),
        WIDE_REDUCE_IN_EXPAND=bool(reduce_wide),
        ADD_INPUTS=add_inputs,
        DORA=dora is not None,
        UPCAST_DOT=not on_gpu and a[0].dtype == torch.bfloat16,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    if known is not None and variants is not None and len(variants) > known:
        # Expected while vLLM captures its CUDA graphs; during serving it names the variant
        # behind a JIT stall (vLLM's own monitor names only the kernel).
        logger.info(
            "fused LoRA kernel compiled for M=%d K=%d N=%s with %s: %s",
            x.shape[0],
            x.shape[1],
            widths,
            cfg,
            list(variants)[known:],  # (a dict keeps its insertion order)
        )
    return cfg
