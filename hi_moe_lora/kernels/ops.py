"""The ``hi_moe_lora::lora_linear`` torch op (own namespace, mutates ``y``, fake impl).

Registered at import, directly in the namespace's library (:mod:`.op_registry`: a few µs a
call where ``torch.library.custom_op`` costs tens). ``slot_rank`` identifies the wrapper's rank
tracker, which learns the stacked weights here, outside any traced graph, and holds B's narrow
copies (:mod:`.narrow_b`) that the kernel's narrow tiles read. ``counters`` is the work list's
zeroed synchronisation buffer: the kernel uses it and leaves it zeroed (declared mutated all the
same).
``no_lora`` is a CPU flag read when the op runs (eagerly, or at graph capture).
``dora_scales`` and ``dora_live`` (both or neither): the layer's DoRA scales and per-slot flags
(:class:`.triton_kernel.DoraEpilogue`), applied as ``y = g * (y + delta)`` to DoRA slots' tokens.
The op is opaque to torch.compile and safe in CUDA graphs: every per-step value it needs lives
in persistent tensors passed as arguments (the work list with its ranks), and the launch
configuration depends only on static shapes. CUDA tensors (or ``TRITON_INTERPRET=1``) take the
Triton kernel; other CPU tensors take the PyTorch fallback.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch

from .config import BLOCK_M_LARGE, BLOCK_M_SMALL, TileConfig, block_m_for
from .fallback import lora_linear_torch
from .layout import DoraEpilogue
from .op_registry import register_op
from .ranks import tracker_for

OP_NAME = "hi_moe_lora::lora_linear"


def use_triton(x: torch.Tensor) -> bool:
    """CUDA tensors, or the Triton interpreter switched on: the Triton kernels run."""
    return x.is_cuda or os.environ.get("TRITON_INTERPRET", "0") == "1"


def lora_linear_impl(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: list[torch.Tensor],
    lora_b: list[torch.Tensor],
    tiles_small: torch.Tensor,
    tiles_large: torch.Tensor,
    slot_rank: torch.Tensor,
    counters: torch.Tensor,
    no_lora: torch.Tensor,
    scale: float,
    offset_start: int,
    add_inputs: bool,
    dora_scales: torch.Tensor | None = None,
    dora_live: torch.Tensor | None = None,
) -> None:
    """``y[t, slices] (+)= scale * x[t] @ A[slot].T @ B[slot].T`` for the work list's tokens.

    ``no_lora`` is a one-element CPU bool tensor (vLLM's ``no_lora_flag_cpu``): when set, no
    token has an adapter and nothing is launched, so a CUDA graph captured for LoRA-free batches
    holds no LoRA kernel at all (vLLM captures those separately).
    """
    tracker = tracker_for(slot_rank)
    if tracker is not None:
        # Before the no-LoRA return: vLLM's memory profile run then sees the narrow copies.
        tracker.observe(lora_a, lora_b)
    if bool(no_lora.item()):
        return
    min_rank = 0
    narrow_b = None
    if tracker is not None:
        min_rank = tracker.max_rank if tracker.stale else 0
        narrow_b = tracker.narrow_b.copies_of(lora_b)
    if (dora_scales is None) != (dora_live is None):
        raise ValueError("DoRA needs both its scales and its per-slot flags")
    if dora_scales is not None and (not add_inputs or offset_start != 0):
        raise ValueError("the DoRA epilogue needs add_inputs and offset_start 0")
    if use_triton(x):
        dora = None
        if dora_scales is not None and dora_live is not None:
            dora = DoraEpilogue(dora_scales, dora_live)
        triton_launcher()(
            y,
            x,
            lora_a,
            lora_b,
            {BLOCK_M_SMALL: tiles_small, BLOCK_M_LARGE: tiles_large},
            counters,
            scale,
            offset_start,
            add_inputs,
            min_rank=min_rank,
            dora=dora,
            narrow_b=narrow_b,
        )
        return
    block_m = block_m_for(x.shape[0])
    tiles = tiles_small if block_m == BLOCK_M_SMALL else tiles_large
    lora_linear_torch(
        y, x, lora_a, lora_b, tiles, block_m, scale, offset_start, add_inputs, min_rank,
        dora_scales, dora_live,
    )  # fmt: skip


@functools.cache
def triton_launcher() -> Callable[..., TileConfig]:
    """:func:`.triton_kernel.launch_fused_lora`, imported on the first Triton call (a CPU host
    never imports Triton's kernels; an import in the op's body cost about 2 µs a call)."""
    from .triton_kernel import launch_fused_lora

    return launch_fused_lora


lora_linear = register_op(OP_NAME, lora_linear_impl, ("y", "counters"))
