"""Kernel tests run the Triton kernels through the interpreter on CPU (CI has no GPU)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def device() -> str:
    """CUDA when present (GPU hosts), otherwise the CPU interpreter."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
