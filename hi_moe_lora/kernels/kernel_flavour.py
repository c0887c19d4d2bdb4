"""A kernel function in the flavour a call takes: compiled for CUDA tensors, run by
Triton's interpreter otherwise (CPU tests, or ``TRITON_INTERPRET=1`` on a GPU host). Each
flavour is made once per kernel function. A compiled flavour can also be compiled ahead of
time for a CUDA target without a GPU (:func:`compile_ahead`: the tests' sm_90 builds).

A kernel that calls device functions resolves them through its globals, and a compiled kernel
needs JIT functions there while the interpreter needs interpreted ones: each flavour then gets
its own copy of the globals, the callees wrapped for it (the source, and so the compiled code,
is shared).
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import triton

#: Device functions a kernel calls, callees first (each may call those before it).
Callees = tuple[Callable[..., Any], ...]


@functools.cache
def _compiled(
    function: Callable[..., Any], do_not_specialize: tuple[str, ...], callees: Callees
) -> Any:
    kernel = with_callees(function, callees, triton.jit)
    return triton.jit(do_not_specialize=list(do_not_specialize))(kernel)


@functools.cache
def _interpreted(function: Callable[..., Any], callees: Callees) -> Any:
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(with_callees(function, callees, InterpretedFunction))


def kernel_for(
    function: Callable[..., Any],
    x: torch.Tensor,
    do_not_specialize: tuple[str, ...] = (),
    callees: Callees = (),
) -> tuple[Any, bool]:
    """The flavour of ``function`` (calling the device functions ``callees``) for a call on
    ``x``, and whether it is the interpreter's (whose dots the kernels upcast to float32)."""
    if x.is_cuda and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return _compiled(function, do_not_specialize, callees), False
    return _interpreted(function, callees), True


def with_callees(
    function: Callable[..., Any], callees: Callees, wrap: Callable[[Callable[..., Any]], Any]
) -> Callable[..., Any]:
    """``function`` over a copy of its module's globals (and its callees' modules') in which
    each callee is wrapped by ``wrap``; ``function`` itself where it calls none."""
    if not callees:
        return function
    scope: dict[str, Any] = {}
    for module_globals in {id(fn.__globals__): fn.__globals__ for fn in callees}.values():
        scope.update(module_globals)
    scope.update(function.__globals__)
    for fn in callees:
        scope[fn.__name__] = wrap(with_globals(fn, scope))
    return with_globals(function, scope)


def with_globals(fn: Callable[..., Any], scope: dict[str, Any]) -> Callable[..., Any]:
    """A copy of ``fn`` that resolves its globals in ``scope``."""
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    # The annotations are not part of the code object, and Triton finds the constexpr
    # parameters through them.
    copy.__annotations__ = dict(fn.__annotations__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    copy.__doc__ = fn.__doc__
    return copy


def served_divisible(
    kernel: Any, types: Mapping[str, str], constexprs: Mapping[str, Any], default_type: str = "i32"
) -> list[str]:
    """The arguments of ``kernel`` (a JIT function) that Triton's JIT specialises as divisible by
    16 in a launch whose pointers are aligned (torch's allocations) and whose integers are
    multiples of 16 (every Llama-shaped layer's sizes, strides and offsets): all but the
    ``constexprs``, the floats (``types``, ``default_type`` for the rest) and those the kernel
    declares not to be specialised. :func:`compile_ahead` given these compiles the variant such a
    launch runs; without them the compiler cannot prove a tile's rows aligned and loads them
    element by element (the fused GEMM at 8 rows: 5,032 instructions and 59 spill stores
    instead of 2,120 and none, which the twenty-eighth window's SASS report read)."""
    return [
        param.name
        for param in kernel.params
        if param.name not in constexprs
        and not param.do_not_specialize
        and not types.get(param.name, default_type).startswith("fp")
    ]


def compile_ahead(
    kernel: Any,
    types: Mapping[str, str],
    constexprs: Mapping[str, Any],
    arch: int = 90,
    default_type: str = "i32",
    options: Mapping[str, int] | None = None,
    divisible_by_16: Iterable[str] = (),
) -> Any:
    """``kernel`` (a JIT function) compiled ahead of time for CUDA ``sm_<arch>`` (Triton's own
    ptxas, no GPU): each argument of the type ``types`` gives it (``default_type`` for the
    rest), the ``constexprs`` fixed, the ``divisible_by_16`` ones specialised as a serving
    launch's aligned pointers and sizes are."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names: list[str] = kernel.arg_names
    signature = {n: "constexpr" if n in constexprs else types.get(n, default_type) for n in names}
    source = ASTSource(
        kernel,
        signature,
        constexprs={(names.index(n),): value for n, value in constexprs.items()},
        attrs={(names.index(n),): [["tt.divisibility", 16]] for n in divisible_by_16},
    )
    target = GPUTarget("cuda", arch, 32)
    return triton.compile(source, target=target, options=dict(options or {}))
