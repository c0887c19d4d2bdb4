"""Our kernels' variants compiled after the kernel warm-up, each one logged.

The warm-up (:mod:`plugins.kernel_warmup`) compiles the variants vLLM's CUDA-graph capture will
need before the capture starts. A variant it missed compiles when a launch first needs it: in
the capture, where it stops the start for seconds, or while serving, where it stalls a step.
:func:`watch` hooks Triton's JIT cache (``knobs.runtime.jit_cache_hook``, called before each
compile a kernel's in-memory cache misses, disk cache hits included) and logs every variant of
a kernel defined under ``hi_moe_lora`` with Triton's description of it: the kernel, its launch
options and each argument's type and specialization, which is what tells a missed variant from
the warm-up's. A hook already installed (vLLM's JIT monitor installs others) keeps being called,
and its answer is Triton's.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

logger = logging.getLogger(__name__)

OUR_MODULES = "hi_moe_lora."
_LOCK = threading.Lock()


class LateCompileWatch:
    """The hook :func:`watch` installs: counts and logs our variants, then defers to the hook
    it replaced (``previous``)."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        self.count = 0

    def __call__(self, **kwargs: Any) -> Any:
        fn = kwargs.get("fn")
        module = str(getattr(fn, "module", "") or "")
        if module.startswith(OUR_MODULES) and not kwargs.get("is_manual_warmup", False):
            with _LOCK:
                self.count += 1
                count = self.count
            logger.info(
                "hi-moe-lora: kernel variant %d compiled after the warm-up: %s",
                count,
                kwargs.get("repr", getattr(fn, "name", "?")),
            )
        if self.previous is not None:
            return self.previous(**kwargs)
        return None


def _knobs() -> Any:
    """Triton's runtime knobs, or None where this Triton has no JIT cache hook."""
    try:
        from triton import knobs
    except ImportError:
        return None
    runtime = getattr(knobs, "runtime", None)
    return runtime if hasattr(runtime, "jit_cache_hook") else None


def watch() -> LateCompileWatch | None:
    """Log our kernels' variants compiled from now on (idempotent: the watch installed, or None
    where Triton has no JIT cache hook)."""
    runtime = _knobs()
    if runtime is None:
        return None
    with _LOCK:
        current = runtime.jit_cache_hook
        if isinstance(current, LateCompileWatch):
            return current
        hook = LateCompileWatch(current)
        runtime.jit_cache_hook = hook
    return hook


def unwatch() -> None:
    """Put back the hook :func:`watch` replaced (tests, switching back)."""
    runtime = _knobs()
    if runtime is None:
        return
    with _LOCK:
        current = runtime.jit_cache_hook
        if isinstance(current, LateCompileWatch):
            runtime.jit_cache_hook = current.previous
