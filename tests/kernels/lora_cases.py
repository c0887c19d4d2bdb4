"""Random multi-LoRA problems shared by the kernel tests (fresh inputs, never zeros)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hi_moe_lora.kernels.worklist import WorkListBuffers


@dataclass
class Problem:
    x: torch.Tensor
    y: torch.Tensor
    lora_a: list[torch.Tensor]
    lora_b: list[torch.Tensor]
    token_slots: torch.Tensor
    slot_rank: torch.Tensor
    work: WorkListBuffers


def make_problem(
    m: int,
    k: int,
    widths: list[int],
    ranks: list[int],
    token_slots: torch.Tensor,
    *,
    max_rank: int | None = None,
    dtype: torch.dtype = torch.float16,
    device: str = "cpu",
    extra_cols: int = 0,
    seed: int = 0,
) -> Problem:
    """``ranks[s]`` is slot s's real rank; weights are zero-padded to ``max_rank`` like vLLM's."""
    gen = torch.Generator().manual_seed(seed)
    slots = len(ranks)
    pad = max_rank or max(ranks)
    x = torch.randn(m, k, generator=gen).to(dtype)
    y = torch.randn(m, sum(widths) + extra_cols, generator=gen).to(dtype)
    lora_a, lora_b = [], []
    for n in widths:
        a = torch.zeros(slots, 1, pad, k)
        b = torch.zeros(slots, 1, n, pad)
        for s, r in enumerate(ranks):
            a[s, 0, :r] = torch.randn(r, k, generator=gen) / k**0.5
            b[s, 0, :, :r] = torch.randn(n, r, generator=gen) / r**0.5
        lora_a.append(a.to(dtype).to(device))
        lora_b.append(b.to(dtype).to(device))
    work = WorkListBuffers(max(m, 1), slots, device)
    work.update(token_slots.numpy(), ranks)
    slot_rank = torch.tensor(ranks, dtype=torch.int32, device=device)
    return Problem(x.to(device), y.to(device), lora_a, lora_b, token_slots, slot_rank, work)


def tolerance(dtype: torch.dtype, ref: torch.Tensor) -> float:
    scale = max(1.0, float(ref.abs().max()))
    return (6e-3 if dtype == torch.float16 else 4e-2) * scale
