"""Which served names each vLLM replica has loaded, as far as the control plane knows.

vLLM's API server keeps every LoRA name it has resolved (``serving_models.lora_requests``) and
lists them in ``GET /v1/models``; a request for a name it does not know goes through the
resolver plugin and a load from disk first. :class:`LoadedAdapters` keeps that set per replica,
in memory: replaced by the health monitor's ``/v1/models`` reading, added to when a request or a
warm-up for a name succeeds on a replica. The front door reads it to count adapter cache hits
and misses without a network round trip.

A name vLLM knows may still have been evicted from the GPU's ``--max-loras`` slots (it is then
reloaded from vLLM's CPU cache, not from disk): a "hit" here means "no resolver call and no disk
load", which is where a cold start's seconds go.
"""

from __future__ import annotations

from collections.abc import Iterable


class LoadedAdapters:
    """Per replica URL: the served names vLLM has loaded."""

    def __init__(self) -> None:
        self._names: dict[str, set[str]] = {}

    def knows(self, replica_url: str, served_name: str) -> bool:
        return served_name in self._names.get(replica_url, ())

    def mark(self, replica_url: str, served_name: str) -> None:
        """``served_name`` answered on ``replica_url``: vLLM has it loaded now."""
        self._names.setdefault(replica_url, set()).add(served_name)

    def replace(self, replica_url: str, served_names: Iterable[str]) -> None:
        """What the replica itself listed (``GET /v1/models``)."""
        self._names[replica_url] = set(served_names)

    def forget(self, replica_url: str) -> None:
        """The replica went away: whatever it had loaded is gone with it."""
        self._names.pop(replica_url, None)

    def names(self, replica_url: str) -> frozenset[str]:
        return frozenset(self._names.get(replica_url, ()))
