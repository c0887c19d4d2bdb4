"""Served versions that must not be sent to vLLM: broken files on disk, or foreign weights.

Two findings of the health monitor, kept apart because different checks replace them:

- *Artifacts*: vLLM reloads an adapter from its path whenever the version left its worker's LRU
  cache; if the files are gone or unreadable there, the worker raises and vLLM's engine core
  dies (seen on vLLM 0.32 CPU: ``EngineDeadError``, every later request answers 500 until vLLM
  is restarted; reported upstream as vllm-project/vllm#30690 and #5105). The monitor checks each
  served version's artifact every round and records the broken ones (:meth:`Quarantine.replace`).
- *Foreign bindings*: a replica has the served name bound to weights the registry did not issue
  (someone loaded them on vLLM's own port). Held from the moment the monitor sees it until vLLM
  confirmed the name's unload (:meth:`Quarantine.replace_bindings`), so the front door never
  forwards a request that vLLM would answer with those weights under the registry's name.

The front door refuses quarantined versions (503, with the reason) and warm-up skips them. In
memory; read on the request path without I/O.
"""

from __future__ import annotations

from collections.abc import Mapping


class Quarantine:
    """Served name → why it must not be sent to vLLM."""

    def __init__(self) -> None:
        self._artifacts: dict[str, str] = {}
        self._bindings: dict[str, str] = {}

    def reason(self, served_name: str) -> str | None:
        return self._artifacts.get(served_name) or self._bindings.get(served_name)

    def replace(self, reasons: Mapping[str, str]) -> None:
        """The latest artifact check's findings (versions no longer listed are released)."""
        self._artifacts = dict(reasons)

    def replace_bindings(self, reasons: Mapping[str, str]) -> None:
        """Served names some replica binds to foreign weights now (the others are released)."""
        self._bindings = dict(reasons)
