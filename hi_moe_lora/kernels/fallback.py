"""PyTorch implementation of the fused LoRA linear (CPU hosts, or no Triton).

Same contract and the same rounding points as the Triton kernel: the rank-sized intermediate is
accumulated in float32, scaled, rounded to the weights' dtype, then expanded in float32 and added
to ``y`` (or written, when ``add_inputs`` is false) for the tokens of each work-list tile;
then DoRA slots' tokens are scaled, ``y = g * (y + delta)``, as the kernel's epilogue does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .reference_loops import stacked_view
from .worklist import HEADER_SIZE, record_size


def lora_linear_torch(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: Sequence[torch.Tensor],
    lora_b: Sequence[torch.Tensor],
    tiles: torch.Tensor,
    block_m: int,
    scale: float,
    offset_start: int,
    add_inputs: bool,
    min_rank: int = 0,
    dora_scales: torch.Tensor | None = None,
    dora_live: torch.Tensor | None = None,
) -> None:
    """Apply the work list ``tiles`` (records of ``block_m`` rows, see :mod:`.worklist`);
    ``dora_scales`` / ``dora_live``: the layer's DoRA scales and per-slot flags."""
    host_tiles = tiles.cpu().tolist()
    count = int(host_tiles[0])
    width = record_size(block_m)
    m = x.shape[0]
    for t in range(count):
        record = host_tiles[HEADER_SIZE + width * t : HEADER_SIZE + width * (t + 1)]
        slot, rank, length = record[0], max(record[1], min_rank), record[2]
        rows = torch.tensor([r for r in record[3 : 3 + length] if r < m], dtype=torch.int64)
        if rows.numel() == 0:
            continue
        xs = x[rows].to(torch.float32)
        dora = None
        if dora_scales is not None and dora_live is not None and int(dora_live[slot]) != 0:
            dora = dora_scales[slot].to(torch.float32)
        col = offset_start
        for a_stack, b_stack in zip(lora_a, lora_b, strict=True):
            a = stacked_view(a_stack)[slot, :rank]
            b = stacked_view(b_stack)[slot, :, :rank]
            inter = ((xs @ a.to(torch.float32).T) * scale).to(b.dtype)
            delta = inter.to(torch.float32) @ b.to(torch.float32).T
            n = b.shape[0]
            if add_inputs:
                delta = delta + y[rows, col : col + n].to(torch.float32)
            if dora is not None:
                delta = delta * dora[col : col + n]
            y[rows, col : col + n] = delta.to(y.dtype)
            col += n
