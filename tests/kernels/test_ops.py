"""The hi_moe_lora::lora_linear custom op: eager (interpreter and fallback), opcheck, compile."""

from __future__ import annotations

import pytest
import torch

from hi_moe_lora.kernels import ops
from hi_moe_lora.kernels.reference_loops import lora_linear_reference

from .lora_cases import make_problem, tolerance


def _args(p, scale: float = 1.0):  # type: ignore[no-untyped-def]
    return (
        p.y,
        p.x,
        p.lora_a,
        p.lora_b,
        p.work.tiles[16],
        p.work.tiles[64],
        p.slot_rank,
        p.work.counters,
        torch.tensor([False]),
        scale,
        0,
        True,
    )


@pytest.mark.parametrize("interpret", ["1", "0"])
def test_op_matches_reference(interpret: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if interpret == "1" and torch.cuda.is_available():
        pytest.skip("the interpreter path is CI's; GPU hosts run the compiled kernel")
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    slots = torch.randint(-1, 3, (21,), generator=torch.Generator().manual_seed(4))
    p = make_problem(21, 40, [32, 16], [8, 16, 16], slots, seed=4)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.5)
    torch.ops.hi_moe_lora.lora_linear(*_args(p, 0.5))
    assert (p.y.double() - ref).abs().max().item() <= tolerance(torch.float16, ref)


@pytest.mark.parametrize("interpret", ["1", "0"])
def test_op_applies_dora_scales(interpret: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if interpret == "1" and torch.cuda.is_available():
        pytest.skip("the interpreter path is CI's; GPU hosts run the compiled kernel")
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    slots = torch.randint(-1, 3, (21,), generator=torch.Generator().manual_seed(8))
    p = make_problem(21, 40, [32, 16], [8, 16, 16], slots, seed=8)
    scales = 0.5 + torch.rand(4, 48, generator=torch.Generator().manual_seed(2))
    live = torch.tensor([0, 1, 1], dtype=torch.int32)
    ref = lora_linear_reference(
        p.y, p.x, p.lora_a, p.lora_b, slots, 0.5, dora_scales=scales, dora_live=live
    )
    torch.ops.hi_moe_lora.lora_linear(*_args(p, 0.5), scales, live)
    assert (p.y.double() - ref).abs().max().item() <= tolerance(torch.float16, ref)
    with pytest.raises(ValueError, match="both"):
        torch.ops.hi_moe_lora.lora_linear(*_args(p, 0.5), scales, None)


def test_opcheck_schema_and_fake() -> None:
    slots = torch.randint(-1, 3, (9,), generator=torch.Generator().manual_seed(5))
    p = make_problem(9, 40, [16], [8, 8, 8], slots, seed=5)
    torch.library.opcheck(ops.lora_linear, _args(p), test_utils=("test_schema", "test_faketensor"))


def test_runs_under_torch_compile_fullgraph() -> None:
    slots = torch.randint(-1, 3, (12,), generator=torch.Generator().manual_seed(6))
    p = make_problem(12, 40, [16, 16], [16, 8, 8], slots, seed=6)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 1.0)
    args = _args(p)

    def layer(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out = y * 1
        torch.ops.hi_moe_lora.lora_linear(out, x, *args[2:])
        return out

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    got = compiled(p.y, p.x)
    assert (got.double() - ref).abs().max().item() <= tolerance(torch.float16, ref)


def test_no_lora_flag_skips_everything() -> None:
    slots = torch.randint(0, 3, (8,), generator=torch.Generator().manual_seed(8))
    p = make_problem(8, 40, [16], [8, 8, 8], slots, seed=8)
    y0 = p.y.clone()
    args = list(_args(p))
    args[8] = torch.tensor([True])
    torch.ops.hi_moe_lora.lora_linear(*args)
    assert torch.equal(p.y, y0)
