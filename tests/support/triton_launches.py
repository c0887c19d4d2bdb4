"""What our kernels' launch sites ask Triton for, and which variant Triton would give it.

Shared by the kernel and warm-up tests: a recorder of the launches a module makes through
``warm_compile.launch``, and the specialization Triton's JIT binder (the code a GPU launch runs
to pick a compiled variant) gives a launch's arguments, so a CPU-only suite can tell whether
two launches would share one variant.
"""

from __future__ import annotations

from typing import Any

import pytest

Launch = tuple[tuple[Any, ...], dict[str, Any]]


def record_launches(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Launch]:
    """``module``'s launches through its ``launch`` name from now on, as (args, kwargs)."""
    launches: list[Launch] = []
    real = module.launch

    def recording(kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> Any:
        launches.append((args, kwargs))
        return real(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(module, "launch", recording)
    return launches


def jit_function(monkeypatch: pytest.MonkeyPatch, factory: Any) -> Any:
    """The JIT function a cached ``factory`` (a module's ``_compiled``) makes on a GPU host,
    made here with the interpreter off (a factory first called under ``TRITON_INTERPRET=1``
    caches an interpreted function instead, which has no binder)."""
    from triton.runtime.jit import JITFunction

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    factory.cache_clear()
    kernel = factory()
    assert isinstance(kernel, JITFunction)
    return kernel


def binder_specialization(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The specialization the CUDA backend's binder gives these arguments of the JIT function
    ``kernel``, written out (types, divisibility, constants): launches with equal ones share a
    compiled variant."""
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.jit import create_function_from_signature

    binder = create_function_from_signature(kernel.signature, kernel.params, CUDABackend)
    return repr(binder(*args, **kwargs)[1])
