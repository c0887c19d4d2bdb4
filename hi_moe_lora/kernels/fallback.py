"""PyTorch implementation of the fused LoRA linear (CPU hosts, or no Triton).

Same contract and the same rounding points as the Triton kernel: the rank-sized intermediate is
accumulated in float32, scaled, rounded to the weights' dtype, then expanded in float32 and added
to ``y`` (or written, when ``add_inputs`` is false) for the tokens of each work-list tile.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .reference import stacked_view


def lora_linear_torch(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    lora_b: Sequence[torch.Tensor],
    token_indices: torch.Tensor,
    tiles: torch.Tensor,
    slot_rank: torch.Tensor,
    scale: float,
    offset_start: int,
    add_inputs: bool,
) -> None:
    """Apply the work list ``tiles`` (see :mod:`.worklist`) to ``y`` in place."""
    host_tiles = tiles.cpu().tolist()
    count = int(host_tiles[0])
    if count == 0:
        return
    order = token_indices.to(torch.int64)
    ranks = slot_rank.cpu().tolist()
    m = x.shape[0]
    for t in range(count):
        slot, start, length = host_tiles[1 + 3 * t : 4 + 3 * t]
        rows = order[start : start + length]
        rows = rows[rows < m]
        if rows.numel() == 0:
            continue
        rank = int(ranks[slot])
        xs = x[rows].to(torch.float32)
        col = offset_start
        for a_stack, b_stack in zip(lora_a, lora_b, strict=True):
            a = stacked_view(a_stack)[slot, :rank]
            b = stacked_view(b_stack)[slot, :, :rank]
            inter = ((xs @ a.to(torch.float32).T) * scale).to(b.dtype)
            delta = inter.to(torch.float32) @ b.to(torch.float32).T
            n = b.shape[0]
            if add_inputs:
                delta = delta + y[rows, col : col + n].to(torch.float32)
            y[rows, col : col + n] = delta.to(y.dtype)
            col += n
