"""A kernel's flavour per call: the interpreter's without a GPU (or when asked for), made once."""

from __future__ import annotations

import pytest
import torch

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
