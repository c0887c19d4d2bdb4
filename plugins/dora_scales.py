"""DoRA's per-output scale of LoRA layers whose base weight is not at hand (vLLM plugin).

``g = m / ||W + B A||_row`` (:mod:`plugins.dora`) needs the row norms of ``W + B A``. A served
layer may hold ``W`` packed for its GEMM or quantized, so :func:`dora_scales` computes them from
what the layer offers instead: ``||W||^2`` per row and the layer's own product ``x W^T``. Pure
tensor arithmetic, no vLLM: checked against PEFT's ``DoraLinearLayer`` in
``tests/plugins/test_dora_scales.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def dora_scales(
    slices: Sequence[int],
    row_norm_sq: Sequence[torch.Tensor],
    lora_a: Sequence[Sequence[torch.Tensor]],
    lora_b: Sequence[Sequence[torch.Tensor]],
    magnitudes: Sequence[Sequence[torch.Tensor | None]],
    apply_base: Sequence[Callable[[torch.Tensor], torch.Tensor]],
) -> torch.Tensor:
    """DoRA's per-output scale ``m / ||W + B A||_row`` of ``L`` layers of one shape (possibly
    packed: ``slices`` are their output slices), without the weights ``W`` themselves: a
    served layer may hold its weight packed or quantized.

    ``||W_i + (BA)_i||^2 = ||W_i||^2 + sum_r B_ir (2 (A W^T)_ri + (B A A^T)_ir)``: per layer,
    ``row_norm_sq[l]`` is ``||W_i||^2`` (``plugins.dora.row_norms``) and ``apply_base[l](x)``
    the served layer's own product ``x W^T``, applied once to the rows of every slice's ``A``
    together; the rest needs only ``A A^T`` and is batched over the layers, so the cost is one
    GEMM per layer plus a few launches per slice. ``lora_a[l][i]`` is slice ``i``'s ``[r, in]``
    (one ``r`` per slice across the layers; zero-padded ranks add nothing), ``lora_b[l][i]``
    its ``[out_i, r]`` (scaling folded in), ``magnitudes[l][i]`` its ``[out_i]`` or ``None``:
    that slice (a LoRA slice, or one the adapter does not touch) scales by one, in every layer.
    Float32 on the norms' device (the terms add; none cancels). Returns ``[L, sum(slices)]``.
    """
    layers = len(row_norm_sq)
    if not layers == len(lora_a) == len(lora_b) == len(magnitudes) == len(apply_base):
        raise ValueError("one set of row norms, A, B, magnitudes and product per layer")
    width = sum(slices)
    if any(norms.dim() != 1 or norms.numel() != width for norms in row_norm_sq):
        raise ValueError(f"row norms do not match slices {tuple(slices)}")
    if any(
        len(per_layer) != len(slices)
        for group in (lora_a, lora_b, magnitudes)
        for per_layer in group
    ):
        raise ValueError("one LoRA A, B and magnitude per slice")
    present = [m is not None for m in magnitudes[0]]
    if any([m is not None for m in per_layer] != present for per_layer in magnitudes):
        raise ValueError("the layers' slices differ in which have magnitudes")
    device = row_norm_sq[0].device
    norm_sq = torch.stack([norms.to(torch.float32) for norms in row_norm_sq])
    scale = torch.ones_like(norm_sq)
    live = [i for i, has in enumerate(present) if has]
    if not live:
        return scale
    products = []
    for layer in range(layers):
        rows = [lora_a[layer][i] for i in live]
        products.append(apply_base[layer](torch.cat(rows) if len(rows) > 1 else rows[0]))
    a_w = torch.stack(products).to(device=device, dtype=torch.float32)  # [L, sum r, out]
    starts = [sum(slices[:i]) for i in range(len(slices))]
    row = 0
    for i in live:
        size, start = slices[i], starts[i]
        a = torch.stack([per_layer[i] for per_layer in lora_a]).to(device, torch.float32)
        b = torch.stack([per_layer[i] for per_layer in lora_b]).to(device, torch.float32)
        m = torch.stack([per_layer[i].reshape(-1) for per_layer in magnitudes])  # type: ignore[union-attr]
        if m.shape[1] != size:
            raise ValueError(f"magnitude of {m.shape[1]} values for {size} outputs")
        rank = a.shape[1]
        cross = a_w[:, row : row + rank, start : start + size].transpose(1, 2)  # [L, out_i, r]
        row += rank
        # B (A A^T) + 2 (A W^T)^T, then each row's dot with B
        mixed = torch.baddbmm(cross, b, a @ a.transpose(1, 2), beta=2.0)
        slice_sq = norm_sq[:, start : start + size] + (b * mixed).sum(dim=2)
        m32 = m.to(device=device, dtype=torch.float32)
        scale[:, start : start + size] = m32 * slice_sq.clamp_min(0.0).rsqrt()
    return scale
