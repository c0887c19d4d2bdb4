"""Which version of an adapter serves a request, without a database query per request.

A lookup in the registry costs milliseconds (a worker thread and a SQLite/PostgreSQL round trip);
the front door's budget is under one millisecond. :class:`VersionTable` keeps, per adapter, the
versions with the traffic share the registry computed for each (active version: the remainder;
A/B candidates: their weight) for at most ``ttl_s`` seconds, and drops an adapter's entry the
moment its active version changes (the adapter service's ``on_active_changed``, awaited before
the promote/rollback call returns), so a promotion or rollback applies to the very next request.
Other changes (a new traffic split, a newly registered or deleted version) apply within ``ttl_s``;
names the table does not hold are always looked up.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from registry.errors import NotFoundError
from registry.services import traffic
from registry.services.adapters import AdapterService
from registry.services.naming import served_name_or_not_found
from registry.services.records import AdapterInfo

DEFAULT_TTL_S = 1.0


@dataclass(frozen=True)
class ServedVersion:
    name: str
    version: str
    served_name: str


@dataclass(frozen=True)
class _Entry:
    fetched_at: float
    versions: dict[str, ServedVersion]
    shares: dict[str, float]


def _entry(info: AdapterInfo, now: float) -> _Entry:
    versions = {
        v.version: ServedVersion(info.name, v.version, v.served_name) for v in info.versions
    }
    return _Entry(now, versions, {v.version: v.traffic_share for v in info.versions})


class VersionTable:
    """Per-adapter routing snapshot with a short TTL and explicit invalidation."""

    def __init__(
        self,
        adapters: AdapterService,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._adapters = adapters
        self._ttl_s = ttl_s
        self._rng = rng or random.Random()
        self._clock = clock
        self._entries: dict[str, _Entry] = {}

    def forget(self, name: str) -> None:
        """Drop ``name``'s snapshot (its active version changed)."""
        self._entries.pop(name, None)

    async def choose(self, model: str) -> ServedVersion:
        """``name`` -> a version by the A/B split; ``name@version`` -> that version.

        Raises the registry's :class:`NotFoundError` when there is no such adapter or version.
        """
        parsed = served_name_or_not_found(model)
        entry = await self._entry(parsed.name)
        if parsed.version is not None:
            served = entry.versions.get(parsed.version)
            if served is None:
                raise NotFoundError(f"{model} is not registered", code="version_not_found")
            return served
        picked = traffic.pick(entry.shares, self._rng.random())
        if picked is None:
            raise NotFoundError(f"{parsed.name} has no active version", code="no_active_version")
        return entry.versions[picked]

    async def _entry(self, name: str) -> _Entry:
        now = self._clock()
        entry = self._entries.get(name)
        if entry is not None and now - entry.fetched_at < self._ttl_s:
            return entry
        info = await self._adapters.get_adapter(name)
        entry = _entry(info, now)
        self._entries[name] = entry
        return entry


class ActiveVersionChanged:
    """The adapter service's ``on_active_changed`` listener: route the adapter afresh (at once,
    before the promote/rollback call returns), then make every vLLM replica forget its bare name
    (``invalidate``: it returns quickly and lets slow replicas finish in the background)."""

    def __init__(
        self, versions: VersionTable, invalidate: Callable[[str], Awaitable[None]]
    ) -> None:
        self._versions = versions
        self._invalidate = invalidate

    async def __call__(self, name: str) -> None:
        self._versions.forget(name)
        await self._invalidate(name)
