"""The fused Triton kernel against the float64 reference (interpreter on CPU, or a GPU)."""

from __future__ import annotations

import pytest
import torch

from hi_moe_lora.kernels.config import TileConfig
from hi_moe_lora.kernels.reference import lora_linear_reference
from hi_moe_lora.kernels.triton_kernel import FusedLoRAShapeError, launch_fused_lora

from .lora_cases import make_problem, tolerance

K = 40
SHAPES = {
    "o": [48],
    "qkv": [64, 16, 16],
    "gate_up": [40, 40],
}


def _slots(m: int, mix: str, n_slots: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if mix == "none":
        return torch.full((m,), -1, dtype=torch.int64)
    if mix == "one":
        return torch.full((m,), 1, dtype=torch.int64)
    return torch.randint(-1, n_slots, (m,), generator=gen)


def _run(problem, scale: float, offset: int = 0, add_inputs: bool = True, cfg=None):
    return launch_fused_lora(
        problem.y,
        problem.x,
        problem.lora_a,
        problem.lora_b,
        problem.work.token_indices,
        problem.work.tiles,
        problem.slot_rank,
        problem.work.counters,
        scale,
        offset,
        add_inputs,
        config=cfg,
    )


@pytest.mark.parametrize("m", [1, 3, 16, 64, 257])
@pytest.mark.parametrize("mix", ["none", "one", "many"])
def test_matches_reference_over_batch_sizes(m: int, mix: str, device: str) -> None:
    ranks = [8, 16, 64, 16]
    slots = _slots(m, mix, len(ranks), seed=m)
    p = make_problem(m, K, SHAPES["qkv"], ranks, slots, device=device, seed=m)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.75)
    _run(p, 0.75)
    err = (p.y.double().cpu() - ref).abs().max().item()
    assert err <= tolerance(torch.float16, ref)
    if mix == "none":
        assert torch.equal(p.y.double().cpu(), ref)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("rank", [8, 16, 64])
def test_shapes_and_ranks(shape: str, rank: int, device: str) -> None:
    slots = _slots(29, "many", 3, seed=rank)
    p = make_problem(29, K, SHAPES[shape], [rank] * 3, slots, device=device, seed=rank)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 2.0)
    _run(p, 2.0)
    assert (p.y.double().cpu() - ref).abs().max().item() <= tolerance(torch.float16, ref)


def test_real_rank_below_padding_is_exact_and_rank_bound_is_used(device: str) -> None:
    slots = _slots(20, "many", 2, seed=3)
    p = make_problem(20, K, [48], [8, 16], slots, max_rank=64, device=device, seed=3)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 1.0)
    y0 = p.y.clone()
    _run(p, 1.0)
    assert (p.y.double().cpu() - ref).abs().max().item() <= tolerance(torch.float16, ref)
    # A rank bound below the real rank must change the result: the bound is really applied.
    p.y.copy_(y0)
    p.slot_rank.fill_(4)
    _run(p, 1.0)
    assert (p.y.double().cpu() - ref).abs().max().item() > tolerance(torch.float16, ref)


def test_write_only_mode_and_column_offset_leave_other_cells(device: str) -> None:
    m = 33
    slots = _slots(m, "many", 3, seed=5)
    p = make_problem(m, K, [24, 24], [16, 8, 16], slots, device=device, extra_cols=10, seed=5)
    p.y.fill_(float("nan"))
    _run(p, 0.5, offset=6, add_inputs=False)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.5, 6, add_inputs=False)
    got = p.y.double().cpu()
    has = slots >= 0
    assert not torch.isnan(got[has][:, 6:54]).any()
    assert torch.isnan(got[~has]).all()
    assert torch.isnan(got[:, :6]).all()
    assert torch.isnan(got[:, 54:]).all()
    diff = (got[has][:, 6:54] - ref[has][:, 6:54]).abs().max().item()
    assert diff <= tolerance(torch.float16, ref[has][:, 6:54])


def test_bfloat16_and_prefill_config_with_groups(device: str) -> None:
    m = 150
    slots = _slots(m, "many", 4, seed=9)
    p = make_problem(
        m, 72, [100, 36], [16, 8, 32, 16], slots, dtype=torch.bfloat16, device=device, seed=9
    )
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 1.5)
    cfg = TileConfig(64, 32, 32, 32, 2, 2, 4, 2)
    _run(p, 1.5, cfg=cfg)
    assert (p.y.double().cpu() - ref).abs().max().item() <= tolerance(torch.bfloat16, ref)


def test_persistent_grid_loops_over_all_items(device: str) -> None:
    m = 40
    slots = _slots(m, "many", 3, seed=11)
    p = make_problem(m, K, [64], [16, 16, 16], slots, device=device, seed=11)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 1.0)
    launch_fused_lora(
        p.y,
        p.x,
        p.lora_a,
        p.lora_b,
        p.work.token_indices,
        p.work.tiles,
        p.slot_rank,
        p.work.counters,
        1.0,
        max_programs=1,
    )
    assert (p.y.double().cpu() - ref).abs().max().item() <= tolerance(torch.float16, ref)


def test_rejects_mismatched_layout(device: str) -> None:
    slots = _slots(4, "one", 2, seed=1)
    p = make_problem(4, K, [16], [8, 8], slots, device=device)
    with pytest.raises(FusedLoRAShapeError):
        launch_fused_lora(
            p.y,
            p.x[:, :-1],
            p.lora_a,
            p.lora_b,
            p.work.token_indices,
            p.work.tiles,
            p.slot_rank,
            p.work.counters,
            1.0,
        )
    with pytest.raises(FusedLoRAShapeError):
        launch_fused_lora(
            p.y,
            p.x,
            p.lora_a,
            p.lora_b,
            p.work.token_indices,
            p.work.tiles,
            p.slot_rank,
            p.work.counters,
            1.0,
            offset_start=1,
        )
