"""The base GEMM with the fused slot's LoRA inside (interpreter on CPU, compiled on a GPU)
against a float64 reference."""

from __future__ import annotations

import pytest
import torch

from hi_moe_lora.kernels.gemm_lora import (
    GemmLoRAShapeError,
    GemmTile,
    fusable,
    gemm_tile,
    launch_gemm_lora,
)
from hi_moe_lora.kernels.layout import DoraEpilogue

SLOTS = 3


def _case(
    m: int, k: int, widths: list[int], rank: int, device: str, dtype: torch.dtype, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    n = sum(widths)
    x = torch.randn(m, k, generator=gen)
    w = torch.randn(n, k, generator=gen) / k**0.5
    a = [torch.randn(SLOTS, 1, rank, k, generator=gen) / k**0.5 for _ in widths]
    b = [torch.randn(SLOTS, 1, wd, rank, generator=gen) / rank**0.5 for wd in widths]
    move = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
    return move(x), move(w), [move(t) for t in a], [move(t) for t in b]


def _reference(
    x: torch.Tensor,
    w: torch.Tensor,
    a: list[torch.Tensor],
    b: list[torch.Tensor],
    slots: list[int],
    fused: int,
    scale: float,
) -> torch.Tensor:
    """float64, the intermediate rounded to the input dtype as the kernels round it."""
    out = x.double() @ w.double().T
    col = 0
    for a_i, b_i in zip(a, b, strict=True):
        width = b_i.shape[2]
        for row, slot in enumerate(slots):
            if slot == fused and fused >= 0:
                inter = ((x[row].double() @ a_i[slot, 0].double().T) * scale).to(x.dtype)
                out[row, col : col + width] += inter.double() @ b_i[slot, 0].double().T
        col += width
    return out


@pytest.mark.parametrize(
    ("m", "widths", "rank", "slots", "fused"),
    [
        (5, [64, 32, 32], 16, [1, 1, -1, 1, 1], 1),  # qkv-like, a base row among them
        (16, [128], 8, [0] * 16, 0),  # one slice, rank padded to 16
        (40, [64, 64], 16, [2, 0, 2, 2, 1] * 8, 2),  # other slots' rows left alone
        (8, [64], 16, [-1] * 8, -1),  # no fused slot: the base GEMM only
    ],
)
def test_the_fused_slots_rows_get_their_lora_and_every_row_the_base(
    m: int, widths: list[int], rank: int, slots: list[int], fused: int, device: str
) -> None:
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    x, w, a, b = _case(m, 128, widths, rank, device, dtype)
    token_slot = torch.tensor(slots, dtype=torch.int32, device=device)
    fused_slot = torch.tensor([fused], dtype=torch.int32, device=device)
    y = torch.full((m, sum(widths)), float("nan"), dtype=dtype, device=device)
    launch_gemm_lora(y, x, w, a, b, token_slot, fused_slot, 0.5, tile=GemmTile(32, 64, 2))
    ref = _reference(x, w, a, b, slots, fused, 0.5)
    tol = 1e-4 if dtype == torch.float32 else 4e-2
    assert float((y.double() - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))


def test_dora_scales_the_fused_slots_rows_when_the_slot_is_live(device: str) -> None:
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    x, w, a, b = _case(4, 64, [64], 16, device, dtype, seed=3)
    slots = [0, 1, 1, -1]
    g = torch.rand(SLOTS + 1, 64, generator=torch.Generator().manual_seed(1)).to(device) + 0.5
    live = torch.tensor([0, 1, 0], dtype=torch.int32, device=device)
    y = torch.empty(4, 64, dtype=dtype, device=device)
    launch_gemm_lora(
        y, x, w, a, b,
        torch.tensor(slots, dtype=torch.int32, device=device),
        torch.tensor([1], dtype=torch.int32, device=device),
        1.0, DoraEpilogue(g, live), tile=GemmTile(32, 64, 2),
    )  # fmt: skip
    ref = _reference(x, w, a, b, slots, 1, 1.0)
    ref[1:3] *= g[1].double()
    tol = 1e-4 if dtype == torch.float32 else 4e-2
    assert float((y.double() - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))


def test_shapes_that_are_not_whole_tiles_are_refused(device: str) -> None:
    x, w, a, b = _case(4, 128, [48], 16, device, torch.float32)
    token_slot = torch.zeros(4, dtype=torch.int32, device=device)
    fused = torch.zeros(1, dtype=torch.int32, device=device)
    y = torch.empty(4, 48, device=device)
    with pytest.raises(GemmLoRAShapeError, match="whole tiles"):
        launch_gemm_lora(y, x, w, a, b, token_slot, fused, 1.0, tile=GemmTile(32, 64, 2))
    with pytest.raises(GemmLoRAShapeError, match="slices"):
        launch_gemm_lora(y, x, w, a, b[:0], token_slot, fused, 1.0)


def test_fusable_takes_decode_sized_half_precision_calls_of_whole_tiles() -> None:
    x = torch.empty(64, 4096, dtype=torch.bfloat16)
    w = torch.empty(6144, 4096, dtype=torch.bfloat16)
    qkv = [torch.empty(2, 1, wd, 16, dtype=torch.bfloat16) for wd in (4096, 1024, 1024)]
    assert fusable(x, w, qkv, max_rows=64)
    assert not fusable(x, w, qkv, max_rows=32)  # (more rows than decode)
    assert not fusable(x.float(), w.float(), qkv, max_rows=64)
    assert not fusable(x, w, qkv[:2], max_rows=64)  # (slices do not cover W)


def test_the_tile_follows_the_weights_shape() -> None:
    assert gemm_tile(28672, 4096) == GemmTile(64, 64, 6)  # gate_up
    assert gemm_tile(4096, 4096) == GemmTile(32, 128, 4)  # o
    assert gemm_tile(6144, 4096) == GemmTile(64, 128, 4)  # qkv
