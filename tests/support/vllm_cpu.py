"""What vLLM's CPU build really loads in this process: the ground truth that tests compare
:mod:`hi_moe_lora.app.host_support` with, and that tests needing a kernel skip on."""

from __future__ import annotations

from pathlib import Path

import torch

#: The op AWQ layers call on vLLM's CPU build (``CPUWNA16LinearKernel``).
AWQ_OP = "cpu_gemm_wna16"


def _import_kernels() -> None:
    from vllm.platforms import current_platform

    current_platform.import_kernels()


def loaded_kernel_library() -> Path | None:
    """The vllm/_C*.so this process maps once vLLM's CPU platform has imported its kernels."""
    _import_kernels()
    mapped = {
        Path(line.split()[-1])
        for line in Path("/proc/self/maps").read_text().splitlines()
        if "/vllm/_C" in line and line.rstrip().endswith(".so")
    }
    assert len(mapped) <= 1, mapped
    return next(iter(mapped)) if mapped else None


def serves_awq() -> bool:
    """Whether vLLM's CPU build registered its AWQ kernel on this host: only its AVX-512
    libraries carry it; an AVX2-only host loads ``_C_AVX2`` and the engine fails to start on an
    AWQ model."""
    _import_kernels()
    return hasattr(torch.ops._C, AWQ_OP)
