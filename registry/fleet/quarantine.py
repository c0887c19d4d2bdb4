"""Served versions that must not be sent to vLLM, because their files are broken on disk.

vLLM reloads an adapter from its path whenever the version left its worker's LRU cache; if the
files are gone or unreadable there, the worker raises and vLLM's engine core dies (seen on vLLM
0.32 CPU: ``EngineDeadError``, every later request answers 500 until vLLM is restarted; reported
upstream as vllm-project/vllm#30690 and #5105). The
health monitor checks each served version's artifact every round and records the broken ones
here; the front door refuses them (503, with the reason) and warm-up skips them, so one broken
adapter cannot take the whole replica down. In memory; read on the request path without I/O.
"""

from __future__ import annotations

from collections.abc import Mapping


class Quarantine:
    """Served name → why it must not be sent to vLLM."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}

    def reason(self, served_name: str) -> str | None:
        return self._reasons.get(served_name)

    def replace(self, reasons: Mapping[str, str]) -> None:
        """The latest check's findings (versions no longer listed are released)."""
        self._reasons = dict(reasons)
