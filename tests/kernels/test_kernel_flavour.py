"""A kernel's flavour per call: the interpreter's without a GPU (or when asked for), made once."""

from __future__ import annotations

import pytest
import torch
import triton.language as tl

from hi_moe_lora.kernels.kernel_flavour import kernel_for


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
