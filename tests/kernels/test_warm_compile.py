"""Launches inside ``compiling()`` compile their variants and run nothing; outside they run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
import torch

import hi_moe_lora.kernels.gemm_op  # noqa: F401  (registers the op)
from hi_moe_lora.kernels.config import BLOCK_M_LARGE, BLOCK_M_SMALL
from hi_moe_lora.kernels.gemm_tiles import SeveralRoute, default_plan
from hi_moe_lora.kernels.warm_compile import (
    async_compile_mode,
    compiling,
    integer_class,
    only_compiling,
    require_compiling,
)
from hi_moe_lora.kernels.worklist import WorkListBuffers

SLOTS, RANK = 4, 16
ONE_ADAPTER = [1] * 8
SEVERAL = [0, 3, 3, -1, 2, 3, 0, 3, 1, 1]


@pytest.fixture(autouse=True)
def _split_form_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The small shape takes the rule of thumb's plan with the split form on every device (the
    shrink launched ahead, the expand in the GEMM's epilogue: two of our launch sites)."""
    import hi_moe_lora.kernels.gemm_lora as gemm_lora

    monkeypatch.setattr(
        gemm_lora,
        "plan_for",
        lambda device, n, k: replace(default_plan(n, k), several=SeveralRoute.SPLIT),
    )


def _op_call(
    slots: list[int], device: str, min_rows: int
) -> tuple[Callable[[], None], torch.Tensor]:
    """A qkv-like call of the op (K 256, slices 128 + 64 + 64) and its output, NaN until a
    launch writes it; ``min_rows`` 1: the fused GEMM, 65: cuBLAS then our launch."""
    gen = torch.Generator().manual_seed(len(slots))
    m, k, widths = len(slots), 256, (128, 64, 64)
    half = lambda t: t.to(device, torch.bfloat16)  # noqa: E731
    x = half(torch.randn(m, k, generator=gen))
    w = half(torch.randn(sum(widths), k, generator=gen) / k**0.5)
    a = [half(torch.randn(SLOTS, 1, RANK, k, generator=gen) / k**0.5) for _ in widths]
    b = [half(torch.randn(SLOTS, 1, n, RANK, generator=gen) / RANK**0.5) for n in widths]
    work = WorkListBuffers(128, SLOTS, device, fused_slot=True)
    work.update(np.array(slots), [RANK] * SLOTS)
    assert work.fused_slot is not None
    y = torch.full((m, sum(widths)), float("nan"), dtype=torch.bfloat16, device=device)
    token_slot = torch.tensor(slots, dtype=torch.int32, device=device)
    ranks = torch.full((SLOTS,), RANK, dtype=torch.int32, device=device)
    active = torch.tensor([len(set(slots))], dtype=torch.int32)

    def call() -> None:
        torch.ops.hi_moe_lora.gemm_lora_linear(
            y, x, w, a, b, work.tiles[BLOCK_M_SMALL], work.tiles[BLOCK_M_LARGE],
            work.rest_tiles[BLOCK_M_SMALL], work.rest_tiles[BLOCK_M_LARGE], token_slot,
            work.fused_slot, ranks, work.counters, work.gemm_arrivals, torch.tensor([False]),
            1.0, min_rows, 64, active, True,
        )  # fmt: skip

    return call, y


@pytest.mark.parametrize("slots", [ONE_ADAPTER, SEVERAL])
@pytest.mark.parametrize("threads", [1, 2])
def test_inside_a_block_the_fused_gemm_and_the_shrink_run_nothing(
    slots: list[int], threads: int, device: str
) -> None:
    call, y = _op_call(slots, device, min_rows=1)
    with compiling(threads) as batch:
        assert only_compiling()
        call()
    assert not only_compiling()
    assert torch.isnan(y).all()  # (no launch wrote the output)
    parallel = threads > 1 and async_compile_mode() is not None
    assert batch.threads == (threads if parallel else 1)
    assert (batch.variants is None) == (not parallel)
    call()  # (outside the block the same call runs)
    assert not torch.isnan(y).any()


def test_inside_a_block_our_launch_after_cublas_runs_nothing(device: str) -> None:
    """Below the fused rows: cuBLAS still runs (it is not ours to compile), our launch not."""
    call, y = _op_call(SEVERAL, device, min_rows=65)
    with compiling(2):
        call()
    base = y.clone()
    assert not torch.isnan(base).any()
    call()
    assert not torch.equal(y, base)  # (the LoRA our launch adds, left out inside the block)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiles for the GPU at hand")
@pytest.mark.parametrize("slots", [ONE_ADAPTER, SEVERAL])
def test_the_variants_a_block_compiles_are_the_ones_the_call_then_launches(
    slots: list[int],
) -> None:
    from hi_moe_lora.kernels.gemm_lora import KERNEL_CALLEES, _gemm_lora_kernel
    from hi_moe_lora.kernels.gemm_shrink import _gemm_shrink_kernel, shrink_program
    from hi_moe_lora.kernels.kernel_flavour import _compiled
    from hi_moe_lora.kernels.launch_plan import variant_cache

    kernels = [
        _compiled(_gemm_lora_kernel, ("m",), KERNEL_CALLEES),
        _compiled(_gemm_shrink_kernel, ("m",), (shrink_program,)),
    ]
    call, y = _op_call(slots, "cuda", min_rows=1)
    with compiling(4):
        call()
    compiled = [len(variant_cache(kernel) or {}) for kernel in kernels]
    call()
    assert [len(variant_cache(kernel) or {}) for kernel in kernels] == compiled
    assert not torch.isnan(y).any()


def test_blocks_do_not_nest() -> None:
    with compiling(1), pytest.raises(RuntimeError, match="already inside"), compiling(2):
        pass
    assert not only_compiling()


@pytest.mark.skipif(async_compile_mode() is None, reason="Triton without asynchronous compiles")
def test_a_failed_compile_raises_at_the_blocks_end_and_leaves_no_async_mode_behind() -> None:
    """(Triton 3.6 leaves its mode active when a compile fails; the block clears it.)"""
    import inspect

    from triton.runtime import _async_compile

    def failing() -> None:
        raise RuntimeError("compile failed")

    def a_block_with_a_failing_compile() -> None:
        with compiling(2):
            mode = _async_compile.active_mode.get()
            assert mode is not None
            callbacks = len(inspect.signature(mode.submit).parameters) - 2  # (3.6: 1; 3.9: 2)
            mode.submit("key", failing, *[lambda *_: None] * callbacks)

    with pytest.raises(RuntimeError, match="compile failed"):
        a_block_with_a_failing_compile()
    assert _async_compile.active_mode.get() is None
    assert not only_compiling()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "i32/16"),
        (1, "1"),
        (17, "i32"),
        (2**31 - 16, "i32/16"),
        (2**31, "i64/16"),
        (2**31 + 8, "i64"),
        (-(2**31), "i32/16"),
        (2**63, "u64/16"),
    ],
)
def test_integers_fall_in_tritons_classes(value: int, expected: str) -> None:
    """The classes are Triton's own (its JIT's specialization of an integer argument)."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.nvidia.compiler import CUDABackend

    kind, spec = native_specialize_impl(CUDABackend, value, False, True, True)[:2]
    tritons = "1" if kind == "constexpr" else kind + ("/16" if spec == "D" else "")
    assert integer_class(value) == expected == tritons


def test_require_compiling_refuses_its_caller_outside_a_compiling_block() -> None:
    with pytest.raises(RuntimeError, match=r"^warm\(\) belongs inside warm_compile.compiling\(\)"):
        require_compiling("warm()")
    with compiling(1):
        require_compiling("warm()")
