"""Many tensors described to one kernel launch: their element offsets from the lowest-addressed.

A Triton kernel takes a fixed number of pointer arguments, but a model's LoRA layers hold one
stacked weight tensor per layer and slice (224 on the Llama-3-8B shape). Tensors of one dtype on
one device can all be reached from the lowest-addressed of them, the base, through whole-element
offsets, which a table in device memory hands the kernel (:mod:`.rank_scan`, :mod:`.narrow_copy`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def element_offsets(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[int]] | None:
    """The base (lowest-addressed tensor) and each tensor's distance from it in elements; None
    for no tensors, mixed dtypes or devices, or an address not a whole element from the base."""
    if not tensors:
        return None
    first = tensors[0]
    if any(t.dtype != first.dtype or t.device != first.device for t in tensors):
        return None
    size = first.element_size()
    base = min(tensors, key=lambda t: t.data_ptr())
    distances = [t.data_ptr() - base.data_ptr() for t in tensors]
    if any(d % size for d in distances):
        return None
    return base, [d // size for d in distances]


def device_table(rows: list[list[int]], device: torch.device) -> torch.Tensor:
    """``rows`` as an int64 table on ``device`` (one row per tensor)."""
    return torch.tensor(rows, dtype=torch.int64).to(device)
