"""Wrapping one method of a vLLM class in place, once, and putting vLLM's own back.

Our plugins change vLLM's behaviour by wrapping a method on its class (the fused GEMM's
``_apply_sync``, the kernel warm-up's ``_create_lora_modules``, the compile cache key's
``compute_hash``). Each wrap keeps vLLM's own method on the class under a mark of its own, which
makes a second install a no-op (vLLM loads the plugins in every process, sometimes twice) and
lets tests and a switch back restore it exactly. One lock serializes every wrap and restore.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_LOCK = threading.Lock()


def wrap_method(
    cls: type, name: str, mark: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> bool:
    """Replace ``cls.<name>`` (defined on ``cls`` itself) with ``wrap(vLLM's method)``, keeping
    vLLM's method on ``cls`` under ``mark``; nothing when ``mark`` is already there. True when
    this call wrapped it. The wrapper keeps the method's docstring."""
    with _LOCK:
        if mark in cls.__dict__:
            return False
        original = cls.__dict__[name]
        replacement = wrap(original)
        replacement.__doc__ = original.__doc__
        setattr(cls, name, replacement)
        setattr(cls, mark, original)
    return True


def unwrap_method(cls: type, name: str, mark: str) -> bool:
    """Put vLLM's method kept under ``mark`` back as ``cls.<name>``; True when one was."""
    with _LOCK:
        original = cls.__dict__.get(mark)
        if original is None:
            return False
        setattr(cls, name, original)
        delattr(cls, mark)
    return True
