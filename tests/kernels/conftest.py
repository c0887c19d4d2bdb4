"""Kernel tests run the Triton kernels through the interpreter on CPU (CI has no GPU)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _interpreter_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a GPU, route the custom op to the Triton interpreter (per test, not globally)."""
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture
def device() -> str:
    """CUDA when present (GPU hosts), otherwise the CPU interpreter."""
    return "cuda" if torch.cuda.is_available() else "cpu"
