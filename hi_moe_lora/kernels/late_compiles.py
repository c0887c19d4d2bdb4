"""Our kernels' variants compiled after the kernel warm-up, each one logged.

The warm-up (:mod:`plugins.kernel_warmup`) compiles the variants vLLM's CUDA-graph capture will
need before the capture starts. A variant it missed compiles when a launch first needs it: in
the capture, where it stops the start for seconds, or while serving, where it stalls a step.
:func:`watch` hooks Triton's JIT cache (``knobs.runtime.jit_cache_hook``, called before each
compile a kernel's in-memory cache misses, disk cache hits included) and logs every variant of
a kernel defined under ``hi_moe_lora`` with its fields (each argument's type and whether
Triton specialized it as divisible by 16, each constexpr, the launch options) and the fields in
which it differs from the nearest variant of that kernel the warm-up compiled
(:func:`recording_warm_up`): what tells the warm-up's inputs from the capture's. A hook already
installed (vLLM's JIT monitor installs others) keeps being called, and its answer is Triton's.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

logger = logging.getLogger(__name__)

OUR_MODULES = "hi_moe_lora."
#: The words each late variant's log line holds (``benchmarks/kernels/capture_pauses.py`` and
#: ``gpu_e2e.sh`` import them to find the lines).
LATE_COMPILE_MARK = "compiled after the warm-up"
_LOCK = threading.Lock()


Variant = dict[str, str]


def describe(compile_info: Any) -> Variant:
    """A variant's fields from what Triton hands its hooks (``compile``): each argument's type,
    with ``/16`` where Triton specialized it as divisible by 16 (a pointer's alignment, an
    integer's), each constexpr's value, and the launch options."""
    info = compile_info if isinstance(compile_info, dict) else {}
    signature = info.get("signature") or {}
    constants = info.get("constants") or {}
    configs = info.get("configs") or [{}]
    attrs = configs[0] if configs and isinstance(configs[0], dict) else {}
    fields: Variant = {}
    for index, (name, kind) in enumerate(dict(signature).items()):
        path = (index,)
        if kind == "constexpr":
            fields[str(name)] = str(constants.get(path, constants.get(name, "?")))
        else:
            fields[str(name)] = f"{kind}/16" if path in attrs else str(kind)
    for option in ("num_warps", "num_stages"):
        if option in info:
            fields[option] = str(info[option])
    return fields


def differences(variant: Variant, others: list[Variant]) -> str:
    """How ``variant`` differs from the nearest of ``others`` (fewest fields apart), as
    ``field=value (warm-up: other)`` items; empty where there is none to compare."""
    if not others:
        return ""
    nearest = min(others, key=lambda other: _distance(variant, other))
    names = [*variant, *(name for name in nearest if name not in variant)]
    return ", ".join(
        f"{name}={variant.get(name, '-')} (warm-up: {nearest.get(name, '-')})"
        for name in names
        if variant.get(name) != nearest.get(name)
    )


def _distance(a: Variant, b: Variant) -> int:
    return sum(a.get(name) != b.get(name) for name in set(a) | set(b))


class LateCompileWatch:
    """The hook :func:`watch` installs. While ``warming`` it records our variants (the warm-up's);
    after, it counts and logs each of ours with how it differs from the nearest variant of the
    same kernel the warm-up compiled. Either way it then defers to the hook it replaced
    (``previous``)."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous
        self.count = 0
        self.warming = False
        self.warm: dict[str, list[Variant]] = {}
        #: called with the kernel's name after each late variant is logged (a metric's counter)
        self.listeners: list[Callable[[str], None]] = []

    def listen(self, listener: Callable[[str], None]) -> None:
        """Have ``listener`` called with each late variant's kernel name (once per listener)."""
        with _LOCK:
            if listener not in self.listeners:
                self.listeners.append(listener)

    def __call__(self, **kwargs: Any) -> Any:
        fn = kwargs.get("fn")
        module = str(getattr(fn, "module", "") or "")
        if module.startswith(OUR_MODULES):
            self._observe(str(getattr(fn, "name", "?")), kwargs)
        if self.previous is not None:
            return self.previous(**kwargs)
        return None

    def _observe(self, name: str, kwargs: dict[str, Any]) -> None:
        variant = describe(kwargs.get("compile"))
        with _LOCK:
            if self.warming:
                self.warm.setdefault(name, []).append(variant)
                return
            if kwargs.get("is_manual_warmup", False):
                return
            self.count += 1
            count = self.count
            warm = list(self.warm.get(name, ()))
        apart = differences(variant, warm) if warm else "no variant of it in the warm-up"
        logger.info(
            "hi-moe-lora: kernel variant %d %s: %s; %s (%s)",
            count,
            LATE_COMPILE_MARK,
            name,
            apart or "the same fields as a warm-up variant",
            ", ".join(f"{k}={v}" for k, v in variant.items()) or kwargs.get("repr", "?"),
        )
        for listener in list(self.listeners):
            try:
                listener(name)
            except Exception:  # (a listener must not fail Triton's compile)
                logger.exception("hi-moe-lora: a late-compile listener failed")


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


@contextlib.contextmanager
def recording_warm_up() -> Iterator[LateCompileWatch | None]:
    """A block whose compiles of ours are the warm-up's: recorded, not logged, so that each
    variant compiled after it is logged with how it differs from them; the watch stays."""
    hook = watch()
    if hook is not None:
        hook.warming = True
    try:
        yield hook
    finally:
        if hook is not None:
            hook.warming = False


def unwatch() -> None:
    """Put back the hook :func:`watch` replaced (tests, switching back)."""
    runtime = _knobs()
    if runtime is None:
        return
    with _LOCK:
        current = runtime.jit_cache_hook
        if isinstance(current, LateCompileWatch):
            runtime.jit_cache_hook = current.previous
