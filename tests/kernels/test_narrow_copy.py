"""The one-launch rewrite of narrow B copies against the per-tensor copy (interpreter on CPU)."""

from __future__ import annotations

import pytest
import torch

from hi_moe_lora.kernels.narrow_b import NarrowB
from hi_moe_lora.kernels.narrow_copy import NarrowCopy, compile_for_target
from hi_moe_lora.kernels.warm_compile import compiling
from tests.support.triton_launches import binder_specialization, jit_function, record_launches


def _b(slots: int, out: int, rank: int, dtype: torch.dtype, device: str, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(slots, 1, out, rank, generator=gen).to(dtype).to(device)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_one_launch_copies_the_named_slots_of_every_tensor(dtype: torch.dtype, device: str) -> None:
    stacks = [
        _b(4, 300, 64, dtype, device, 0),  # more rows than one block
        _b(4, 8, 32, dtype, device, 1),
        _b(2, 40, 64, dtype, device, 2)[:, :, :, :48],  # fewer slots; rows strided past the rank
    ]
    copies = [torch.zeros(b.shape[0], b.shape[2], 16, dtype=dtype, device=device) for b in stacks]
    launch = NarrowCopy.build(list(zip(stacks, copies, strict=True)))
    assert launch is not None
    launch.copy([3, 0])
    for b, copy in zip(stacks, copies, strict=True):
        for slot in range(b.shape[0]):
            expected = b[slot, 0, :, :16] if slot in (3, 0) else torch.zeros_like(copy[slot])
            assert torch.equal(copy[slot], expected), (tuple(b.shape), slot)


def test_build_declines_what_one_table_cannot_describe() -> None:
    b = _b(2, 8, 64, torch.float32, "cpu", 0)
    good = torch.zeros(2, 8, 16)
    assert NarrowCopy.build([]) is None
    assert NarrowCopy.build([(b, good.to(torch.bfloat16))]) is None  # dtypes differ
    assert NarrowCopy.build([(b, torch.zeros(2, 8, 32)[:, :, ::2])]) is None  # strided columns
    assert NarrowCopy.build([(b, torch.zeros(2, 9, 16))]) is None  # shapes differ
    assert NarrowCopy.build([(b[:, :, :, ::4], good)]) is None  # strided rank columns
    assert NarrowCopy.build([(b, good)]) is not None
    assert NarrowCopy.build([(b, torch.zeros(2, 8, 32)[:, :, :16])]) is not None  # row stride 32


@pytest.mark.parametrize("one_launch", [True, False])
def test_narrow_b_refresh_gives_the_same_copies_either_way(one_launch: bool, device: str) -> None:
    narrow = NarrowB(one_launch=one_launch)
    first, second = (
        _b(3, 24, 64, torch.bfloat16, device, 3),
        _b(3, 16, 32, torch.bfloat16, device, 4),
    )
    narrow.observe([first])
    narrow.refresh([0, 2])
    narrow.observe([second])  # a new tensor: the launch is described again
    narrow.refresh([1, 2])
    (copy_first,) = narrow.copies_of([first]) or []
    (copy_second,) = narrow.copies_of([second]) or []
    assert torch.equal(copy_first, first[:, 0, :, :16])
    assert torch.equal(copy_second[1:], second[1:, 0, :, :16])
    assert not copy_second[0].any()  # never refreshed


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_the_copy_compiles_for_sm90(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the GPU's JIT will do, done here: a CPU-only test suite never runs the compiler."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # else triton.jit interprets
    assert compile_for_target(90, dtype).asm["ptx"]


def test_the_warm_up_compiles_the_variant_every_copy_launches(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compile_variant`` (inside a compiling block only) launches what copies of any slots
    launch, by Triton's binder, and writes no copy."""
    from hi_moe_lora.kernels import narrow_copy

    stacks = [_b(3, 24, 64, torch.bfloat16, device, 5), _b(2, 8, 32, torch.bfloat16, device, 6)]
    copies = [torch.zeros(b.shape[0], b.shape[2], 16, dtype=b.dtype, device=device) for b in stacks]
    launch = NarrowCopy.build(list(zip(stacks, copies, strict=True)))
    assert launch is not None
    launches = record_launches(monkeypatch, narrow_copy)
    with pytest.raises(RuntimeError, match="compiling"):
        launch.compile_variant()
    with compiling(1):
        launch.compile_variant()
    assert not any(copy.any() for copy in copies)
    launch.copy([1])
    launch.copy([0, 2])
    assert torch.equal(copies[0], stacks[0][:, 0, :, :16])
    assert len(launches) == 3
    kernel = jit_function(monkeypatch, narrow_copy._compiled)
    assert len({binder_specialization(kernel, *made) for made in launches}) == 1
