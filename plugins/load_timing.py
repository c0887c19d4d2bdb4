"""Time vLLM's own adapter loads inside its worker: ``hi_moe_lora_vllm_adapter_*_seconds``.

vLLM's worker loads an adapter in ``vllm.lora.worker_manager``:
``WorkerLoRAManager._load_adapter`` reads it from disk into CPU tensors, and ``add_adapter``
(overridden by ``LRUCacheWorkerLoRAManager``) calls it for an adapter the worker does not hold,
puts the result in the CPU cache and activates it into a device slot. :func:`install` wraps both
methods on the classes (every instance, every subclass that does not override them):

- ``_load_adapter``: its time goes to ``hi_moe_lora_vllm_adapter_read_seconds``;
- the outermost ``add_adapter`` of a thread, when it called ``_load_adapter``: its whole time
  goes to ``hi_moe_lora_vllm_adapter_load_seconds``. Calls for adapters already held (vLLM makes
  one per active adapter and step) only pass through.

An exception is recorded as ``outcome="error"`` and re-raised unchanged: vLLM's behaviour stays
as it was. The module is usually imported after our plugin registers (vLLM loads plugins before
it builds the model runner, and the API server does not import it to start), so :func:`install`
wraps it at once when it is loaded, and otherwise leaves a one-shot import hook that wraps it
right after Python executes it; the API server never pays for importing it. Idempotent; never
raises.
Version-tolerant: a class or method this vLLM lacks is skipped (logged at DEBUG).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from plugins.metrics import PluginMetrics, plugin_metrics

logger = logging.getLogger(__name__)

TARGET_MODULE = "vllm.lora.worker_manager"
#: (class, method) pairs wrapped when ``TARGET_MODULE`` is loaded.
READ_METHODS = (("WorkerLoRAManager", "_load_adapter"),)
LOAD_METHODS = (
    ("WorkerLoRAManager", "add_adapter"),
    ("LRUCacheWorkerLoRAManager", "add_adapter"),
)
#: Attribute of our wrappers naming the function they wrap.
WRAPPED = "__hi_moe_lora_wrapped__"

_lock = threading.Lock()


class _Calls(threading.local):
    """Per thread: how deep in ``add_adapter`` we are, how many reads have happened."""

    depth = 0
    reads = 0


_calls = _Calls()


def _timed_read(original: Callable[..., Any], metrics: PluginMetrics) -> Callable[..., Any]:
    @functools.wraps(original)
    def _load_adapter(self: Any, *args: Any, **kwargs: Any) -> Any:
        _calls.reads += 1
        started = time.perf_counter()
        try:
            result = original(self, *args, **kwargs)
        except BaseException:
            metrics.observe_read("error", time.perf_counter() - started)
            raise
        metrics.observe_read("loaded", time.perf_counter() - started)
        return result

    setattr(_load_adapter, WRAPPED, original)
    return _load_adapter


def _timed_load(original: Callable[..., Any], metrics: PluginMetrics) -> Callable[..., Any]:
    @functools.wraps(original)
    def add_adapter(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _calls.depth:  # a subclass's add_adapter calling its parent's: the outer one times
            return original(self, *args, **kwargs)
        reads = _calls.reads
        _calls.depth = 1
        started = time.perf_counter()
        try:
            result = original(self, *args, **kwargs)
        except BaseException:
            if _calls.reads != reads:
                metrics.observe_load("error", time.perf_counter() - started)
            raise
        finally:
            _calls.depth = 0
        if _calls.reads != reads:  # it read the adapter from disk: a cold load
            metrics.observe_load("loaded", time.perf_counter() - started)
        return result

    setattr(add_adapter, WRAPPED, original)
    return add_adapter


def _wrap(
    module: ModuleType,
    methods: Sequence[tuple[str, str]],
    timed: Callable[[Callable[..., Any], PluginMetrics], Callable[..., Any]],
    metrics: PluginMetrics,
) -> int:
    wrapped = 0
    for class_name, method_name in methods:
        cls = getattr(module, class_name, None)
        # Only the class's own method: an inherited one is wrapped on the class defining it.
        original = None if cls is None else cls.__dict__.get(method_name)
        if not callable(original):
            logger.debug("hi-moe-lora load timing: no %s.%s here", class_name, method_name)
            continue
        if not hasattr(original, WRAPPED):
            setattr(cls, method_name, timed(original, metrics))
        wrapped += 1
    return wrapped


def patch(module: ModuleType, metrics: PluginMetrics | None = None) -> int:
    """Wrap the load methods of ``module`` (vLLM's worker manager); the number wrapped.

    Idempotent: a method wrapped already is left as it is. Never raises.
    """
    chosen = metrics if metrics is not None else plugin_metrics()
    try:
        with _lock:
            count = _wrap(module, READ_METHODS, _timed_read, chosen)
            count += _wrap(module, LOAD_METHODS, _timed_load, chosen)
    except Exception:
        logger.warning("hi-moe-lora cannot time vLLM's adapter loads", exc_info=True)
        return 0
    if count:
        logger.debug("hi-moe-lora times vLLM's adapter loads (%d methods)", count)
    else:
        logger.warning("hi-moe-lora found no adapter-load method to time in %s", module.__name__)
    return count


def unpatch(module: ModuleType) -> None:
    """Put vLLM's own methods back (tests)."""
    with _lock:
        for class_name, method_name in (*READ_METHODS, *LOAD_METHODS):
            cls = getattr(module, class_name, None)
            current = None if cls is None else cls.__dict__.get(method_name)
            original = getattr(current, WRAPPED, None)
            if original is not None:
                setattr(cls, method_name, original)


class _ThenLoader(importlib.abc.Loader):
    """Runs the real loader, then ``then(module)``; anything else goes to the real loader."""

    def __init__(self, loader: importlib.abc.Loader, then: Callable[[ModuleType], object]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        try:
            self._then(module)
        except Exception:  # the import itself succeeded: it must not fail because of us
            logger.warning("hi-moe-lora: after importing %s", module.__name__, exc_info=True)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, resource readers...
        return getattr(self._loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """One shot: finds ``name`` with the other finders and runs ``then`` once it is executed."""

    def __init__(self, name: str, then: Callable[[ModuleType], object]) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        _remove_hooks(self.name)
        try:
            for finder in sys.meta_path:
                find_spec = getattr(finder, "find_spec", None)
                if find_spec is None:
                    continue
                spec: importlib.machinery.ModuleSpec | None = find_spec(fullname, path, target)
                if spec is None:
                    continue
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ThenLoader(spec.loader, self.then)
                return spec
        except Exception:
            logger.warning("hi-moe-lora cannot watch the import of %s", self.name, exc_info=True)
        return None  # Python's own search goes on: the module loads, without ``then``


def _remove_hooks(name: str) -> None:
    with _lock:
        sys.meta_path[:] = [
            f for f in sys.meta_path if not (isinstance(f, _AfterImport) and f.name == name)
        ]


def after_import(name: str, then: Callable[[ModuleType], object]) -> None:
    """Run ``then(module)`` on module ``name``: now if it is loaded, else right after Python
    executes it (one hook per name, removed when it fires)."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
        return
    with _lock:
        if not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(name, then))


def install() -> None:
    """Time vLLM's adapter loads in this process: now if vLLM's worker manager is loaded,
    otherwise right after it is imported. Idempotent, cheap, never raises."""
    try:
        after_import(TARGET_MODULE, patch)
    except Exception:
        logger.warning("hi-moe-lora cannot time vLLM's adapter loads", exc_info=True)
