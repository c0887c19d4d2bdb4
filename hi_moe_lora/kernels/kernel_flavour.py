"""A kernel function in the flavour a call takes: compiled for CUDA tensors, run by
Triton's interpreter otherwise (CPU tests, or ``TRITON_INTERPRET=1`` on a GPU host). Each
flavour is made once per kernel function."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import torch
import triton


@functools.cache
def _compiled(function: Callable[..., Any], do_not_specialize: tuple[str, ...]) -> Any:
    return triton.jit(do_not_specialize=list(do_not_specialize))(function)


@functools.cache
def _interpreted(function: Callable[..., Any]) -> Any:
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(function)


def kernel_for(
    function: Callable[..., Any], x: torch.Tensor, do_not_specialize: tuple[str, ...] = ()
) -> tuple[Any, bool]:
    """The flavour of ``function`` for a call on ``x``, and whether it is the interpreter's
    (whose dots the kernels upcast to float32)."""
    if x.is_cuda and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return _compiled(function, do_not_specialize), False
    return _interpreted(function), True
