"""Launches that compile their kernel's variant instead of running it, many compiles at once.

Triton compiles a kernel's variant the first time a launch needs it, on the launching thread.
vLLM meets our kernels' variants one at a time while it captures its CUDA graphs, so each new
variant stops the capture for its compile, one after the other: 16-55 s a variant at
``--max-lora-rank 64`` on an H200 host, where the rank parts are unrolled, and a start of about
9-11 minutes (benchmarks/README.md, twenty-third window).

Inside :func:`compiling`, our launch sites (:func:`launch`, and :meth:`.launch_plan.LayerLaunch
.launch`) compile the variant a launch would need (``kernel.warmup``) and run nothing. With
more than one thread, the compiles go to a pool through Triton's asynchronous compile
(``triton.runtime._async_compile``, Triton 3.4 and later; two variants of the fused GEMM
compiled in 4.2 s on two threads against 7.6 s one after the other on a 2-core CPU, so its
passes and ptxas run outside the GIL), and the block's end waits for them all: the variants are
then in each kernel's cache, where the launches that follow find them. Work other than our
kernels' launches (allocations, cuBLAS) still runs. The interpreter (CPU) has nothing to
compile: its launches are skipped.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

_ONLY_COMPILING: ContextVar[bool] = ContextVar("hi_moe_lora_only_compiling", default=False)


def only_compiling() -> bool:
    """Whether launches now compile their variant instead of running (inside :func:`compiling`)."""
    return _ONLY_COMPILING.get()


def require_compiling(caller: str) -> None:
    """Refuse ``caller`` (a method that asks for a variant by launching with stand-in
    arguments) outside :func:`compiling`, where that launch would run for real."""
    if not _ONLY_COMPILING.get():
        raise RuntimeError(f"{caller} belongs inside warm_compile.compiling()")


def launch(kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> Any:
    """``kernel[grid](*args, **kwargs)``; inside :func:`compiling`, the compile of the variant
    that launch needs, with nothing run (the interpreter's kernels: nothing at all)."""
    if not _ONLY_COMPILING.get():
        return kernel[grid](*args, **kwargs)
    if not is_compiled(kernel):
        return None
    return kernel.warmup(*args, grid=grid, **kwargs)


def is_compiled(kernel: Any) -> bool:
    """Whether ``kernel`` is a JIT function compiled for a GPU (not the interpreter's)."""
    from triton.runtime.jit import JITFunction

    return isinstance(kernel, JITFunction)


def integer_class(value: int) -> str:
    """How Triton's JIT tells an integer argument apart when it picks a variant: ``1`` (made a
    constant), else its type by magnitude (``i32``, ``i64``, ``u64``) and ``/16`` where it is
    divisible by 16. Two launches whose integers fall in different classes compile two
    variants (an H200 capture compiled seven more for offsets of ``i32`` against the warm-up's
    ``i64``: benchmarks/README.md, twenty-fourth window)."""
    if value == 1:
        return "1"
    kind = "i32" if -(2**31) <= value < 2**31 else "u64" if value >= 2**63 else "i64"
    return f"{kind}/16" if value % 16 == 0 else kind


@dataclass
class CompileBatch:
    """What a :func:`compiling` block compiled: ``variants`` handed to the pool (None where
    they compiled one by one on the launching thread), on ``threads`` threads, in
    ``seconds`` from the block's start to the last compile's end."""

    threads: int
    variants: int | None = None
    seconds: float = 0.0


def async_compile_mode() -> Any:
    """Triton's ``AsyncCompileMode`` class, or None where this Triton has none (before 3.4)."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return None
    return AsyncCompileMode


@contextlib.contextmanager
def compiling(threads: int) -> Iterator[CompileBatch]:
    """A block whose launches through :func:`launch` compile their variants, on ``threads``
    threads (one, or a Triton without asynchronous compiles: on this thread, each launch
    waiting for its compile); the block ends when every compile has. A compile that fails
    raises here, as the launch would have. Not reentrant."""
    if _ONLY_COMPILING.get():
        raise RuntimeError("already inside a compiling() block")
    mode_class = async_compile_mode() if threads > 1 else None
    batch = CompileBatch(threads=threads if mode_class is not None else 1)
    began = time.perf_counter()
    token = _ONLY_COMPILING.set(True)
    try:
        if mode_class is None:
            yield batch
        else:
            try:
                with (
                    ThreadPoolExecutor(threads, thread_name_prefix="hi-moe-lora-compile") as pool,
                    mode_class(pool) as mode,
                ):
                    yield batch
                    batch.variants = len(mode.raw_futures)
            finally:
                _leave_async_mode()
    finally:
        _ONLY_COMPILING.reset(token)
        batch.seconds = time.perf_counter() - began


def _leave_async_mode() -> None:
    """No asynchronous compile mode left active: Triton 3.6's leaves its mode set when a
    compile failed, and every later compile of the thread would go to the closed pool."""
    from triton.runtime import _async_compile

    if _async_compile.active_mode.get() is not None:
        _async_compile.active_mode.set(None)
