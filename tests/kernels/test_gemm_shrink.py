"""The split form's shrink (interpreter on CPU, compiled on a GPU) against a float64 reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hi_moe_lora.kernels.config import BLOCK_M_LARGE, BLOCK_M_SMALL
from hi_moe_lora.kernels.gemm_shrink import (
    GemmShrinkShapeError,
    launch_gemm_shrink,
    rank_padding,
    shrink_runs,
)
from hi_moe_lora.kernels.worklist import WorkListBuffers, arrival_counters

SLOTS = 5


def _adapters(
    m: int, k: int, rank: int, slices: int, device: str, dtype: torch.dtype
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(m + k + rank)
    x = torch.randn(m, k, generator=gen).to(device, dtype)
    a = [
        (torch.randn(SLOTS, 1, rank, k, generator=gen) / k**0.5).to(device, dtype)
        for _ in range(slices)
    ]
    return x, a


@pytest.mark.parametrize(
    ("m", "k", "rank", "slices", "tile_m", "cycle"),
    [
        (10, 256, 16, 3, BLOCK_M_SMALL, SLOTS + 1),  # qkv-like, one run of K, every slot
        (60, 1024, 8, 1, BLOCK_M_SMALL, 3),  # four runs, rank padded, two tiles a slot
        (24, 768, 64, 2, BLOCK_M_LARGE, SLOTS + 1),  # a wide rank, tiles of 64 rows
    ],
)
def test_every_listed_tokens_partials_sum_to_its_adapters_shrink(
    m: int, k: int, rank: int, slices: int, tile_m: int, cycle: int, device: str
) -> None:
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    x, a = _adapters(m, k, rank, slices, device, dtype)
    slots = [i % cycle - 1 for i in range(m)]  # (tokens without an adapter among them)
    work = WorkListBuffers(64, SLOTS, device)
    work.update(np.array(slots), [rank] * SLOTS)
    arrivals = arrival_counters(device)
    for _ in range(2):  # (the second call finds the counters as the first left them)
        out = launch_gemm_shrink(x, a, work.tiles[tile_m], tile_m, SLOTS, arrivals)
        assert int(arrivals.abs().sum()) == 0
    assert out.shape == (m, slices, rank_padding(rank))
    assert out.dtype == torch.float32
    total = out.double()
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    for row, slot in enumerate(slots):
        if slot < 0:
            continue  # (rows of tokens without an adapter are never read)
        for piece in range(slices):
            expected = x[row].double() @ a[piece][slot, 0].double().T
            got = total[row, piece]
            assert float((got[:rank] - expected).abs().max()) < tol
            assert not bool(got[rank:].any())  # (the padding's ranks are zero)


def test_each_tile_is_shrunk_at_its_own_rank_in_wider_slots(device: str) -> None:
    """Slots of rank 64 holding adapters of ranks 64, 16 and 8 (the work list's records carry
    each slot's real rank): A is read only up to a tile's rank (NaN past it proves it; vLLM
    holds zeros there), and the sum's ranks past it are written as zeros."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    own = [64, 16, 8, 16, 64]
    x, a = _adapters(30, 512, 64, 2, device, dtype)
    for slot, rank in enumerate(own):
        for a_i in a:
            a_i[slot, :, rank:] = float("nan")
    slots = [i % (SLOTS + 1) - 1 for i in range(30)]
    work = WorkListBuffers(64, SLOTS, device)
    work.update(np.array(slots), own)
    arrivals = arrival_counters(device)
    out = launch_gemm_shrink(x, a, work.tiles[BLOCK_M_SMALL], BLOCK_M_SMALL, SLOTS, arrivals)
    assert int(arrivals.abs().sum()) == 0
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    for row, slot in enumerate(slots):
        if slot < 0:
            continue
        rank = own[slot]
        for piece, a_i in enumerate(a):
            expected = x[row].double() @ a_i[slot, 0, :rank].double().T
            got = out[row, piece].double()
            assert float((got[:rank] - expected).abs().max()) < tol
            assert not bool(got[rank:].any())


def test_an_empty_list_launches_programs_that_write_nothing(device: str) -> None:
    x, a = _adapters(8, 256, 16, 1, device, torch.float32 if device == "cpu" else torch.bfloat16)
    work = WorkListBuffers(64, SLOTS, device)
    work.update(np.full(8, -1), [16] * SLOTS)
    arrivals = arrival_counters(device)
    out = launch_gemm_shrink(x, a, work.tiles[BLOCK_M_SMALL], BLOCK_M_SMALL, SLOTS, arrivals)
    assert out.shape == (8, 1, 16)
    assert int(arrivals.abs().sum()) == 0


@pytest.mark.parametrize(
    ("k", "runs"),
    [(4096, 16), (14336, 56), (1024, 4), (256, 1), (128, None), (1000, None)],
)
def test_k_is_cut_into_runs_of_whole_steps(k: int, runs: int | None) -> None:
    assert shrink_runs(k) == runs


def test_shapes_the_shrink_cannot_take_are_refused(device: str) -> None:
    x, a = _adapters(4, 256, 16, 2, device, torch.float32)
    work = WorkListBuffers(64, SLOTS, device)
    work.update(np.zeros(4), [16] * SLOTS)
    tiles, arrivals = work.tiles[BLOCK_M_SMALL], arrival_counters(device)
    with pytest.raises(GemmShrinkShapeError, match="K 128"):
        launch_gemm_shrink(
            x[:, :128].contiguous(), [t[..., :128].contiguous() for t in a], tiles,
            BLOCK_M_SMALL, SLOTS, arrivals,
        )  # fmt: skip
    with pytest.raises(GemmShrinkShapeError, match="does not fit"):
        launch_gemm_shrink(x, [a[0], a[1][:, :, :8]], tiles, BLOCK_M_SMALL, SLOTS, arrivals)
    with pytest.raises(GemmShrinkShapeError, match="4 slices"):
        launch_gemm_shrink(x, [a[0]] * 4, tiles, BLOCK_M_SMALL, SLOTS, arrivals)
    with pytest.raises(GemmShrinkShapeError, match="arrival counters"):
        launch_gemm_shrink(x, a, tiles, BLOCK_M_SMALL, SLOTS, arrivals[:2])
