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

A listing is a reading of the past: a name loaded (and marked) while the ``/v1/models`` request
was under way may be missing from it. :meth:`replace` therefore keeps the names marked since the
reading began (:meth:`now`, taken before the request), so a health round never erases a warm-up's
load that finished while it ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

#: When a listed (not marked) name was marked: before any reading.
LISTED = float("-inf")


class LoadedAdapters:
    """Per replica URL: the served names vLLM has loaded, each with when it was last marked."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._names: dict[str, dict[str, float]] = {}

    def now(self) -> float:
        """The clock's reading: take it before asking a replica for its listing."""
        return self._clock()

    def knows(self, replica_url: str, served_name: str) -> bool:
        return served_name in self._names.get(replica_url, {})

    def mark(self, replica_url: str, served_name: str) -> None:
        """``served_name`` answered on ``replica_url``: vLLM has it loaded now."""
        self._names.setdefault(replica_url, {})[served_name] = self._clock()

    def replace(
        self, replica_url: str, served_names: Iterable[str], read_since: float = LISTED
    ) -> None:
        """What the replica itself listed (``GET /v1/models``) in a reading that began at
        ``read_since`` (a :meth:`now`): names marked since then stay, listed or not."""
        marked = self._names.get(replica_url, {})
        kept = {name: at for name, at in marked.items() if at >= read_since > LISTED}
        self._names[replica_url] = dict.fromkeys(served_names, LISTED) | kept

    def unload(self, replica_url: str, served_name: str) -> None:
        """``served_name`` was unloaded from ``replica_url`` (whenever it was marked)."""
        self._names.get(replica_url, {}).pop(served_name, None)

    def forget(self, replica_url: str) -> None:
        """The replica went away: whatever it had loaded is gone with it."""
        self._names.pop(replica_url, None)

    def names(self, replica_url: str) -> frozenset[str]:
        return frozenset(self._names.get(replica_url, ()))
