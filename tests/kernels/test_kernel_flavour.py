"""A kernel's flavour per call: the interpreter's without a GPU (or when asked for), made once."""

from __future__ import annotations

import re

import pytest
import torch
import triton
import triton.language as tl

from hi_moe_lora.kernels.kernel_flavour import compile_ahead, kernel_for, served_divisible


def _kernel(x_ptr):  # type: ignore[no-untyped-def]  # (never launched here)
    pass


def test_a_cpu_tensor_takes_the_interpreter_once() -> None:
    kernel, interpreted = kernel_for(_kernel, torch.zeros(1))
    assert interpreted
    assert kernel_for(_kernel, torch.zeros(1))[0] is kernel


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA tensor")
def test_a_cuda_tensor_takes_the_compiled_kernel_unless_interpreting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = torch.zeros(1, device="cuda")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not kernel_for(_kernel, x, ("x_ptr",))[1]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert kernel_for(_kernel, x, ("x_ptr",))[1]


def _double(x):  # type: ignore[no-untyped-def]  # (a device function)
    return x * 2


def _store_double(x_ptr, y_ptr):  # type: ignore[no-untyped-def]
    tl.store(y_ptr, _double(tl.load(x_ptr)))


def test_a_kernels_callees_run_in_its_flavour_and_leave_the_module_as_it_was() -> None:
    """The interpreter's flavour calls the callee wrapped for it; the module's own name still
    names the plain function (each flavour has its own copy of the globals)."""
    kernel, interpreted = kernel_for(_store_double, torch.zeros(1), (), (_double,))
    assert interpreted
    x, y = torch.tensor([3.0]), torch.zeros(1)
    kernel[(1,)](x, y)
    assert float(y[0]) == 6.0
    assert globals()["_double"] is _double
    assert kernel_for(_store_double, torch.zeros(1), (), (_double,))[0] is kernel
    assert kernel_for(_store_double, torch.zeros(1))[0] is not kernel


def _copy_block(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.arange(0, BLOCK)
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=offsets < n), mask=offsets < n)


@pytest.mark.parametrize(
    ("aligned", "vectorised"), [(("src_ptr", "dst_ptr", "n"), True), ((), False)]
)
def test_a_kernel_compiles_ahead_for_hopper_specialised_as_told(
    aligned: tuple[str, ...], vectorised: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GPU needed; the arguments declared 16-byte divisible let the loads vectorise, as a
    serving launch's aligned pointers and sizes do."""
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    kernel = triton.jit(_copy_block)
    types = {"src_ptr": "*bf16", "dst_ptr": "*bf16"}
    compiled = compile_ahead(kernel, types, {"BLOCK": 1024}, divisible_by_16=aligned)
    assert compiled.asm["cubin"]
    assert bool(re.search(r"ld\.global[.\w]*\.v[248]\.", compiled.asm["ptx"])) is vectorised


def _scaled_copy(src_ptr, dst_ptr, n, m, scale, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n + m * 0
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask) * scale, mask=mask)


def test_a_served_launch_specialises_all_but_constexprs_floats_and_the_declared_varying(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As Triton's JIT does for aligned pointers and sizes that are multiples of 16: ``m``
    (declared not to be specialised), ``scale`` (a float) and ``BLOCK`` (a constexpr) are not."""
    monkeypatch.delenv(
        "TRITON_INTERPRET", raising=False
    )  # (the JIT function, not the interpreter's)
    kernel = triton.jit(do_not_specialize=["m"])(_scaled_copy)
    types = {"src_ptr": "*bf16", "dst_ptr": "*bf16", "scale": "fp32"}
    assert served_divisible(kernel, types, {"BLOCK": 1024}) == ["src_ptr", "dst_ptr", "n"]
    assert served_divisible(kernel, types, {"BLOCK": 1024, "n": 64}) == ["src_ptr", "dst_ptr"]
    assert served_divisible(kernel, {}, {"BLOCK": 1024}, default_type="fp32") == []
