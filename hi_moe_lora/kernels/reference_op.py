"""A float64 multi-LoRA linear that CUDA graphs can capture: the in-vLLM reference.

``HI_MOE_LORA_KERNELS=reference`` serves the dense LoRA path with this op (the plugin's
``ReferencePunicaWrapperGPU``), so a server runs vLLM's own graphs, attention and sampler with a
LoRA delta computed in float64 and rounded once, into ``y``. Probes against it measure how far
each kernel (ours, vLLM's) is from exact LoRA inside the same model, which their own comparison
cannot tell: two correct kernels that round at different points differ from each other by both
errors. It is for correctness probes only: every token goes through every slot's shrink in
float64 (one product per slice), and the expand is a float64 product as wide as all slots' ranks.

Unlike :mod:`.reference_loops` (tests, host loops), it has no host synchronisation: slots are masked
on the device, so a CUDA graph captures it like any other op. With a layer's DoRA scales and
per-slot flags (as the fused kernel takes them), DoRA slots' rows get ``g * (y + delta)`` in
float64, rounded once.
"""

from __future__ import annotations

import torch

from .op_registry import register_op
from .reference_loops import stacked_view

OP_NAME = "hi_moe_lora::lora_linear_float64"


def _lora_linear_float64(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: list[torch.Tensor],
    lora_b: list[torch.Tensor],
    token_slots: torch.Tensor,
    no_lora: torch.Tensor,
    scale: float,
    offset_start: int,
    add_inputs: bool,
    dora_scales: torch.Tensor | None = None,
    dora_live: torch.Tensor | None = None,
) -> None:
    """``y[t, slices] (+)= scale * x[t] @ A[slot].T @ B[slot].T`` in float64, rounded once.

    ``token_slots`` holds each row's slot (-1: no adapter; rows past its length have none);
    rows without an adapter keep ``y``. ``no_lora`` is vLLM's one-element CPU flag: when set,
    nothing runs (as for the fused kernel).
    """
    if bool(no_lora.item()):
        return
    m = x.shape[0]
    slots = torch.full((m,), -1, dtype=torch.int64, device=x.device)
    known = min(m, token_slots.shape[0])
    slots[:known] = token_slots[:known].to(torch.int64)
    has_adapter = (slots >= 0)[:, None]
    # Row t keeps only its own slot's shrink columns (the same mask for every slice).
    num_slots = stacked_view(lora_a[0]).shape[0] if lora_a else 0
    own = (slots[:, None] == torch.arange(num_slots, device=x.device)[None, :]).to(torch.float64)
    xd = x.to(torch.float64)
    dora_rows = None
    if dora_scales is not None and dora_live is not None:
        slot_or_0 = slots.clamp(min=0)
        live_rows = (dora_live.to(slots.device)[slot_or_0] != 0)[:, None] & has_adapter
        dora_rows = (live_rows, dora_scales.to(torch.float64)[slot_or_0])  # [m, 1], [m, width]
    col = offset_start
    for a_stack, b_stack in zip(lora_a, lora_b, strict=True):
        a = stacked_view(a_stack)  # [slots, rank, k]
        b = stacked_view(b_stack)  # [slots, n, rank]
        rank, n = a.shape[1], b.shape[1]
        # Every slot's shrink in one product, masked to the row's slot, so one expand product
        # serves all slots (no per-slot pass over the output).
        inter = xd @ a.reshape(num_slots * rank, -1).to(torch.float64).T
        inter *= own.repeat_interleave(rank, dim=1)
        b_all = b.permute(0, 2, 1).reshape(num_slots * rank, n).to(torch.float64)
        target = y[:, col : col + n]
        exact = (inter * scale) @ b_all
        if add_inputs:
            exact += target.to(torch.float64)
        if dora_rows is not None:
            live_rows, g = dora_rows
            exact = torch.where(
                live_rows, exact * g[:, col - offset_start : col - offset_start + n], exact
            )
        target.copy_(torch.where(has_adapter, exact.to(y.dtype), target))
        col += n


lora_linear_float64 = register_op(OP_NAME, _lora_linear_float64, ("y",))
