"""The float64 reference op: exact LoRA rounded once, no host sync, opcheck and compile."""

from __future__ import annotations

import pytest
import torch

from hi_moe_lora.kernels import reference_op
from hi_moe_lora.kernels.reference_loops import lora_linear_reference

from .lora_cases import make_problem


def _one_ulp(dtype: torch.dtype, ref: torch.Tensor) -> torch.Tensor:
    """Spacing of ``dtype`` at each reference value: the most a single rounding may move it."""
    return torch.finfo(dtype).eps * ref.abs().clamp_min(torch.finfo(dtype).tiny)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("add_inputs", [True, False])
@pytest.mark.parametrize("m", [1, 7, 33])
def test_matches_float64_reference_within_one_rounding(
    m: int, add_inputs: bool, dtype: torch.dtype
) -> None:
    slots = torch.randint(-1, 3, (m,), generator=torch.Generator().manual_seed(m))
    p = make_problem(m, 40, [24, 8, 8], [8, 16, 4], slots, max_rank=16, dtype=dtype, seed=m)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.5, 0, add_inputs)
    untouched = p.y[slots < 0].clone()
    reference_op.lora_linear_float64(
        p.y,
        p.x,
        p.lora_a,
        p.lora_b,
        slots.to(torch.int32),
        torch.tensor([False]),
        0.5,
        0,
        add_inputs,
    )
    assert ((p.y.double() - ref).abs() <= _one_ulp(dtype, ref)).all()
    assert torch.equal(p.y[slots < 0], untouched)  # no adapter: y kept, even when not adding


@pytest.mark.parametrize("m", [7, 33])
def test_dora_rows_are_scaled_within_one_rounding(m: int) -> None:
    """DoRA slot 1 among LoRA slots 0 and 2 and base rows: ``g * (y + delta)``, rounded once."""
    slots = torch.randint(-1, 3, (m,), generator=torch.Generator().manual_seed(m))
    p = make_problem(m, 40, [24, 8, 8], [8, 16, 4], slots, max_rank=16, seed=m)
    scales = 0.5 + torch.rand(4, 40, generator=torch.Generator().manual_seed(3))
    live = torch.tensor([0, 1, 0], dtype=torch.int32)
    ref = lora_linear_reference(
        p.y, p.x, p.lora_a, p.lora_b, slots, 0.5, dora_scales=scales, dora_live=live
    )
    untouched = p.y[slots < 0].clone()
    reference_op.lora_linear_float64(
        p.y, p.x, p.lora_a, p.lora_b, slots.to(torch.int32), torch.tensor([False]), 0.5, 0,
        True, scales, live,
    )  # fmt: skip
    assert ((p.y.double() - ref).abs() <= _one_ulp(torch.float16, ref)).all()
    assert torch.equal(p.y[slots < 0], untouched)


def test_offset_and_short_slot_table_leave_other_columns_and_rows_alone() -> None:
    """Columns before ``offset_start`` are never written; rows past the slot table have no
    adapter (vLLM's mapping buffer can be shorter than a padded batch)."""
    slots = torch.tensor([0, 1, 0, -1, 1])
    p = make_problem(7, 24, [8], [4, 8], slots, extra_cols=5, seed=3)
    full = torch.cat([slots, torch.tensor([-1, -1])])
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, full, 1.0, offset_start=5)
    before = p.y.clone()
    reference_op.lora_linear_float64(
        p.y, p.x, p.lora_a, p.lora_b, slots, torch.tensor([False]), 1.0, 5, True
    )
    assert torch.equal(p.y[:, :5], before[:, :5])
    assert torch.equal(p.y[5:], before[5:])
    assert ((p.y.double() - ref).abs() <= _one_ulp(torch.float16, ref)).all()


def test_no_lora_flag_runs_nothing() -> None:
    slots = torch.tensor([0, 1, 1])
    p = make_problem(3, 16, [8], [4, 4], slots, seed=2)
    before = p.y.clone()
    reference_op.lora_linear_float64(
        p.y, p.x, p.lora_a, p.lora_b, slots, torch.tensor([True]), 1.0, 0, True
    )
    assert torch.equal(p.y, before)


def _args(p, slots: torch.Tensor):  # type: ignore[no-untyped-def]
    return (p.y, p.x, p.lora_a, p.lora_b, slots, torch.tensor([False]), 1.0, 0, True)


def test_opcheck_schema_and_fake() -> None:
    slots = torch.tensor([1, -1, 0, 1])
    p = make_problem(4, 16, [8, 8], [4, 8], slots, seed=5)
    torch.library.opcheck(
        reference_op.lora_linear_float64,
        _args(p, slots),
        test_utils=("test_schema", "test_faketensor"),
    )


def test_runs_under_torch_compile_fullgraph() -> None:
    slots = torch.tensor([0, 0, -1, 1, 1, 0])
    p = make_problem(6, 16, [8], [8, 4], slots, seed=6)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 1.0)
    args = _args(p, slots)

    def layer(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out = y * 1
        torch.ops.hi_moe_lora.lora_linear_float64(out, x, *args[2:])
        return out

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    out = compiled(p.y, p.x)
    assert ((out.double() - ref).abs() <= _one_ulp(torch.float16, ref)).all()
