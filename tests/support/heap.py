"""The test process's long-lived heap, kept out of the cyclic garbage collector's way.

The suite's process imports torch, vLLM, transformers and the like (at collection, or in the
first test that needs them): a million and more objects that live as long as the process. Every
full (generation 2) collection walks all of them; on 2 cores each took about 0.35 s, a fifth of
the registry tests' time. :class:`HeapFreezer` moves what has survived a full collection into
the permanent generation (``gc.freeze``, as ``serve`` does with ``freeze_heap_at_start``), so
later full collections walk only what tests made since:

- once after collection (the imports of every test module), and
- between two tests, after a test during which a full collection took longer than
  ``slow_s`` (the heap grew: a test imported something large, or a module's fixtures).

Each freeze first collects, between tests (function-scoped fixtures are gone), so garbage is
never frozen; what it freezes is what lives on: modules, caches, wider-scoped fixtures. Objects
frozen are still freed by reference counting; only a reference cycle among them, which a
wider-scoped fixture may leave behind when it ends, is no longer collected.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

logger = logging.getLogger(__name__)

#: A full collection slower than this means the unfrozen heap has grown large.
SLOW_FULL_COLLECTION_S = 0.05


class HeapFreezer:
    """Watches full collections (``gc.callbacks``) and freezes the heap between tests."""

    def __init__(self, slow_s: float = SLOW_FULL_COLLECTION_S) -> None:
        self.slow_s = slow_s
        self._started = 0.0
        self._due = False

    def install(self) -> None:
        gc.callbacks.append(self._on_collection)

    def uninstall(self) -> None:
        """Stop watching, and give the frozen objects back to the collector (the interpreter's
        exit then collects them as usual; nanobind, in triton, reports instances still alive)."""
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        gc.unfreeze()

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif info["generation"] == 2 and time.perf_counter() - self._started > self.slow_s:
            self._due = True

    def freeze(self) -> None:
        """Collect, then freeze every survivor."""
        self._due = False
        gc.collect()
        gc.freeze()
        logger.debug("heap frozen (%d objects in all)", gc.get_freeze_count())

    def between_tests(self) -> None:
        """Freeze if a slow full collection was seen since the last freeze."""
        if self._due:
            self.freeze()
