"""Launching the fused kernel's compiled variants without Triton's JIT dispatch.

On every call, Triton's JIT binds each of the kernel's 52 arguments, works out their
specialisation, builds a cache key from it and looks the compiled variant up: 37 to 56 µs of host
time a call on an H200 host, the largest share of the op's host time in a step that runs op by
op (``benchmarks/kernels/bench_launch_host.py``). A layer's plan (:mod:`.launch_plan`) keeps the
variant the JIT returned, keyed by what Triton specialises a call's arguments on, and launches
it through the compiled kernel's own launcher afterwards.

What Triton specialises on, for the arguments that can change between a layer's calls: a
tensor's dtype and whether its address is a multiple of 16; an integer's type (32 or 64 bits)
and, unless it is declared not to be specialised, whether it equals 1 and whether it is a
multiple of 16. :func:`call_key` records exactly those; a call with an integer outside the
32-bit range goes through the JIT. Two calls with equal keys would get the same variant from
the JIT (``tests/kernels/test_direct_launch.py`` checks the key against Triton's own
specialisation; the GPU test launches both ways with each argument varied).

On by default (``auto``) for the Triton versions it has been run with on a GPU
(:data:`GPU_TESTED`); ``HI_MOE_LORA_DIRECT_LAUNCH=1`` forces it on for others, ``0`` turns it
off. Where a launch hook is registered (a profiler's), the launch goes through the compiled
kernel's runner, which calls the hooks as the JIT does.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch

logger = logging.getLogger(__name__)

ENV = "HI_MOE_LORA_DIRECT_LAUNCH"
#: Triton versions (major, minor) whose direct launches have passed the GPU test.
GPU_TESTED = frozenset({(3, 6)})

I32_MIN, I32_MAX = -(2**31), 2**31 - 1

#: An integer's specialisation classes (Triton's "equal to 1", "multiple of 16", neither).
EQUALS_ONE, MULTIPLE_OF_16, OTHER = 2, 1, 0


class DirectLaunchSwitch:
    """Whether direct launches are on (read once from the environment; tests flip it)."""

    def __init__(self) -> None:
        self.on = default_on(os.environ.get(ENV), triton_version())

    def set(self, on: bool) -> None:
        self.on = on


def triton_version() -> tuple[int, int] | None:
    try:
        import triton
    except ImportError:
        return None
    parts = triton.__version__.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def default_on(env_value: str | None, version: tuple[int, int] | None) -> bool:
    """On for GPU-tested Triton versions, unless the environment says otherwise."""
    value = (env_value or "").strip().lower()
    if value not in ("", "auto"):
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{ENV}={env_value!r}: expected auto, 0 or 1")
    return version in GPU_TESTED


SWITCH = DirectLaunchSwitch()


def int_class(value: int) -> int:
    """Triton's specialisation of a specialised integer (the 32-bit range checked apart)."""
    if value == 1:
        return EQUALS_ONE
    return MULTIPLE_OF_16 if value % 16 == 0 else OTHER


def call_key(
    tensors: Iterable[torch.Tensor], specialised: Iterable[int], unspecialised: Iterable[int]
) -> tuple[object, ...] | None:
    """What Triton specialises these arguments on, or None where a direct launch is not safe
    (an integer outside 32 bits, typed 64-bit by Triton)."""
    ints = tuple(specialised)
    plain = tuple(unspecialised)
    for value in (*ints, *plain):
        if not I32_MIN <= value <= I32_MAX:
            return None
    return (
        *((t.dtype, t.data_ptr() % 16 == 0) for t in tensors),
        *map(int_class, ints),
    )


def trailing_constexprs(
    kernel: Any, runtime_args: int, values: Mapping[str, Any]
) -> tuple[Any, ...] | None:
    """The constexpr parameters' values in the kernel's order, where its first ``runtime_args``
    parameters are the runtime ones and every later one is a constexpr named in ``values``
    (None otherwise: a direct launch passes every parameter by position, as Triton's JIT
    does)."""
    params = list(kernel.params)
    head, tail = params[:runtime_args], params[runtime_args:]
    if len(head) != runtime_args or any(p.is_constexpr for p in head):
        return None
    if not tail or not all(p.is_constexpr and p.name in values for p in tail):
        return None
    return tuple(values[p.name] for p in tail)


@functools.cache
def current_stream_getter() -> Any:
    """Triton's own way to the current CUDA stream of a device (a raw handle)."""
    from triton.runtime import driver

    return driver.active.get_current_stream


def launch(
    compiled: Any, grid: int, device: int, args: tuple[Any, ...], constexprs: tuple[Any, ...]
) -> None:
    """Launch a variant the JIT compiled, through its launcher, on the current stream. With no
    launch hook registered (no profiler listening), the launcher is called as the compiled
    kernel's own runner would call it, without the runner's per-call closure and launch
    metadata (about 8 µs a call under ``cProfile`` on an H200 host); otherwise through that
    runner, which gives the hooks their metadata."""
    stream = current_stream_getter()(device)
    hooks = launch_hooks()
    if hooks is None or any(map(_hook_set, hooks)):
        compiled[(grid, 1, 1)](*args, *constexprs, stream=stream)
        return
    run = compiled.run
    run(grid, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
        *args, *constexprs)  # fmt: skip


def launch_hooks() -> tuple[Any, Any] | None:
    """Triton's launch enter and exit hooks (None where this Triton keeps them elsewhere)."""
    runtime = _runtime_knobs()
    if runtime is None:
        return None
    return runtime.launch_enter_hook, runtime.launch_exit_hook


@functools.cache
def _runtime_knobs() -> Any:
    try:
        from triton import knobs
    except ImportError:
        return None
    runtime = getattr(knobs, "runtime", None)
    if runtime is None or not hasattr(runtime, "launch_enter_hook"):
        return None
    return runtime


def _hook_set(hook: Any) -> bool:
    """Whether a launch hook would be called: a function, or a chain of hooks holding any."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return not isinstance(calls, list) or bool(calls)
