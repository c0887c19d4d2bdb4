"""The dense shrink (interpreter on CPU, compiled on a GPU) against a float64 reference and
against the work-list shrink it stands in for."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hi_moe_lora.kernels.config import BLOCK_M_SMALL
from hi_moe_lora.kernels.gemm_dense_shrink import (
    DENSE_MAX_ROWS,
    dense_runs,
    launch_dense_shrink,
)
from hi_moe_lora.kernels.gemm_lora import arrival_counters
from hi_moe_lora.kernels.gemm_shrink import (
    GemmShrinkShapeError,
    launch_gemm_shrink,
    rank_padding,
)
from hi_moe_lora.kernels.worklist import WorkListBuffers

SLOTS = 5
UNWRITTEN = 12345.0


def _adapters(
    m: int, k: int, rank: int, slices: int, device: str
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    gen = torch.Generator().manual_seed(m + k + rank)
    x = torch.randn(m, k, generator=gen).to(device, dtype)
    a = [
        (torch.randn(SLOTS, 1, rank, k, generator=gen) / k**0.5).to(device, dtype)
        for _ in range(slices)
    ]
    return x, a


def _no_fused_slot(device: str) -> torch.Tensor:
    return torch.full((1,), -1, dtype=torch.int32, device=device)


def _prefilled(m: int, slices: int, rank: int, device: str) -> torch.Tensor:
    shape = (m, slices, rank_padding(rank))
    return torch.full(shape, UNWRITTEN, dtype=torch.float32, device=device)


@pytest.mark.parametrize(
    ("m", "k", "rank", "slices", "columns", "steps", "cycle"),
    [
        (10, 256, 16, 3, 32, 1, SLOTS + 1),  # qkv-like: two slots a program, two runs
        (60, 1024, 8, 1, 64, 2, 3),  # rank padded to 16, a group past the last slot
        (24, 512, 64, 2, 64, 4, SLOTS + 1),  # a wide rank: one slot a program, one run
        (64, 512, 16, 1, 128, 1, 2),  # every row, eight slots a program, four runs
    ],
)
def test_every_slotted_rows_sum_is_its_adapters_shrink_and_no_other_row_is_written(
    m: int, k: int, rank: int, slices: int, columns: int, steps: int, cycle: int, device: str
) -> None:
    x, a = _adapters(m, k, rank, slices, device)
    slots = [i % cycle - 1 for i in range(m)]  # (rows without an adapter among them)
    token_slot = torch.tensor(slots, dtype=torch.int32, device=device)
    arrivals = arrival_counters(device)
    for _ in range(2):  # (the second call finds the counters as the first left them)
        out = launch_dense_shrink(
            x, a, token_slot, _no_fused_slot(device), arrivals, columns, steps,
            _prefilled(m, slices, rank, device),
        )  # fmt: skip
        assert int(arrivals.abs().sum()) == 0
    total = out.double()
    tol = 1e-4 if x.dtype == torch.float32 else 2e-2
    for row, slot in enumerate(slots):
        if slot < 0:
            assert bool((total[row] == UNWRITTEN).all())
            continue
        for piece in range(slices):
            expected = x[row].double() @ a[piece][slot, 0].double().T
            got = total[row, piece]
            assert float((got[:rank] - expected).abs().max()) < tol
            assert not bool(got[rank:].any())  # (the padding's ranks are zero)


def test_it_writes_what_the_work_list_shrink_writes(device: str) -> None:
    m, k, rank, slices = 40, 1024, 16, 3
    x, a = _adapters(m, k, rank, slices, device)
    slots = np.array([(i * 7) % SLOTS for i in range(m)])
    work = WorkListBuffers(64, SLOTS, device)
    work.update(slots, [rank] * SLOTS)
    token_slot = torch.tensor(slots, dtype=torch.int32, device=device)
    tiled = launch_gemm_shrink(
        x, a, work.tiles[BLOCK_M_SMALL], BLOCK_M_SMALL, SLOTS, arrival_counters(device)
    )
    dense = launch_dense_shrink(x, a, token_slot, _no_fused_slot(device), arrival_counters(device))
    assert float((dense - tiled).abs().max()) < (1e-5 if device == "cpu" else 1e-3)


def test_a_step_whose_adapter_rides_in_the_gemm_writes_nothing(device: str) -> None:
    m, k, rank = 16, 512, 16
    x, a = _adapters(m, k, rank, 1, device)
    token_slot = torch.full((m,), 2, dtype=torch.int32, device=device)
    fused = torch.full((1,), 2, dtype=torch.int32, device=device)
    arrivals = arrival_counters(device)
    out = launch_dense_shrink(x, a, token_slot, fused, arrivals, out=_prefilled(m, 1, rank, device))
    assert bool((out == UNWRITTEN).all())
    assert int(arrivals.abs().sum()) == 0


@pytest.mark.parametrize(("k", "runs"), [(4096, 8), (14336, 28), (512, 1), (256, None)])
def test_k_takes_whole_runs_of_four_steps(k: int, runs: int | None) -> None:
    assert dense_runs(k) == runs


def test_calls_it_cannot_take_are_refused_with_the_reason(device: str) -> None:
    x, a = _adapters(DENSE_MAX_ROWS + 1, 512, 16, 1, device)
    token_slot = torch.zeros(DENSE_MAX_ROWS + 1, dtype=torch.int32, device=device)
    fused, arrivals = _no_fused_slot(device), arrival_counters(device)
    with pytest.raises(GemmShrinkShapeError, match="65 rows"):
        launch_dense_shrink(x, a, token_slot, fused, arrivals)
    with pytest.raises(GemmShrinkShapeError, match="K 256"):
        launch_dense_shrink(x[:8, :256].contiguous(), [t[..., :256] for t in a], token_slot,
                            fused, arrivals)  # fmt: skip
    with pytest.raises(GemmShrinkShapeError, match="does not fit"):
        launch_dense_shrink(x[:8], [a[0][:, :, :8]], token_slot, fused, arrivals)
    with pytest.raises(GemmShrinkShapeError, match="token_slot"):
        launch_dense_shrink(x[:8], a, token_slot[:4], fused, arrivals)
    with pytest.raises(GemmShrinkShapeError, match="arrival counters"):
        launch_dense_shrink(x[:8], a, token_slot, fused, arrivals[:0])
    with pytest.raises(GemmShrinkShapeError, match="out must be"):
        launch_dense_shrink(x[:8], a, token_slot, fused, arrivals, out=torch.empty(8, 1, 8))
