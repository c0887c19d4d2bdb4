"""Float64 reference of the packed multi-LoRA linear (tests and benchmarks only).

``y[t, cols(s)] (+)= scale * x[t] @ A_s[slot(t)].T @ B_s[slot(t)].T`` for every slice ``s`` of a
packed layer and every token ``t`` whose slot is not -1; tokens without an adapter keep ``y``.
With DoRA scales, a token whose slot is a DoRA slot then gets ``y[t] = g[slot(t)] * y[t]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def stacked_view(weight: torch.Tensor) -> torch.Tensor:
    """vLLM stacks LoRA weights as ``[slots, 1, rows, cols]``; accept ``[slots, rows, cols]``."""
    if weight.dim() == 4:
        return weight.squeeze(1)
    if weight.dim() == 3:
        return weight
    raise ValueError(f"stacked LoRA weight must have 3 or 4 dims, got {tuple(weight.shape)}")


def lora_linear_reference(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    lora_b: Sequence[torch.Tensor],
    token_slots: torch.Tensor,
    scale: float,
    offset_start: int = 0,
    add_inputs: bool = True,
    dora_scales: torch.Tensor | None = None,
    dora_live: torch.Tensor | None = None,
) -> torch.Tensor:
    """Return the expected ``y`` in float64 (inputs are not modified). ``dora_scales``
    (``[slots, y columns]``) and ``dora_live`` (``[slots]``, non-zero for DoRA slots): DoRA's
    ``g * (y + delta)`` for the tokens of DoRA slots. A ``B`` stored at a lower rank than ``A``
    lacks rank columns that count as zero (as in the fused kernel)."""
    out = y.detach().to(torch.float64).clone()
    slots = token_slots.to(torch.int64).cpu()
    xd = x.detach().to(torch.float64).cpu()
    out = out.cpu()
    col = offset_start
    for a_stack, b_stack in zip(lora_a, lora_b, strict=True):
        a = stacked_view(a_stack).detach().to(torch.float64).cpu()
        b = stacked_view(b_stack).detach().to(torch.float64).cpu()
        n = b.shape[1]
        for slot in torch.unique(slots).tolist():
            if slot < 0:
                continue
            rows = (slots == slot).nonzero().flatten()
            delta = (xd[rows] @ a[slot, : b.shape[2]].T) * scale @ b[slot].T
            base = out[rows, col : col + n] if add_inputs else torch.zeros_like(delta)
            out[rows, col : col + n] = base + delta
        col += n
    if dora_scales is not None and dora_live is not None:
        scales = dora_scales.detach().to(torch.float64).cpu()
        for slot in torch.unique(slots).tolist():
            if slot >= 0 and int(dora_live[slot]) != 0:
                rows = (slots == slot).nonzero().flatten()
                out[rows] = out[rows] * scales[slot]
    return out
