"""Which version of an adapter serves a request, without a database query per request.

A lookup in the registry costs milliseconds (a worker thread and a SQLite/PostgreSQL round trip);
the front door's budget is under one millisecond. :class:`VersionTable` keeps, per adapter, the
versions with the traffic share the registry computed for each (active version: the remainder;
A/B candidates: their weight) for at most ``ttl_s`` seconds, and drops an adapter's entry the
moment its active version changes (the adapter service's ``on_active_changed``, awaited before
the promote/rollback call returns), so a promotion or rollback applies to the very next request.
A deleted version is dropped the same way (:class:`VersionDeleted`); other changes (a new traffic
split, a newly registered version) apply within ``ttl_s``; names the table does not hold are
always looked up. One lookup per adapter runs at a time: while it runs, requests are served from
the expired snapshot (or, with none, wait for that lookup), so an expiry under load costs one
query, not one per request in flight.

While the database is unavailable, an adapter whose snapshot has expired keeps being served from
that last snapshot (a warning once per outage, then one lookup attempt per ``ttl_s``); only
adapters the table has never held (or forgot) answer 503 ``database_unavailable``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from registry.errors import DatabaseUnavailable, NotFoundError
from registry.services import traffic
from registry.services.adapters import AdapterService
from registry.services.naming import served_name_or_not_found
from registry.services.records import AdapterInfo

logger = logging.getLogger(__name__)

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
        #: per name, how often it was forgotten: a lookup that began before a forget must not
        #: store what it read (it may predate the change)
        self._forgotten: dict[str, int] = {}
        self._serving_stale = False  # the database is down and expired snapshots serve
        #: per name, the one lookup under way (and the forget count it began under): requests
        #: that find a snapshot expired share it instead of each querying the database
        self._lookups: dict[str, tuple[int, asyncio.Future[_Entry]]] = {}

    @property
    def ttl_s(self) -> float:
        """How long a snapshot is reused (the ``routing_snapshot_ttl_s`` setting)."""
        return self._ttl_s

    def forget(self, name: str) -> None:
        """Drop ``name``'s snapshot (its active version changed)."""
        self._entries.pop(name, None)
        self._forgotten[name] = self._forgotten.get(name, 0) + 1

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
        generation = self._forgotten.get(name, 0)
        pending = self._lookups.get(name)
        if pending is not None and pending[0] == generation:
            if entry is not None:
                return entry  # being refreshed: the last snapshot serves until then
            return await asyncio.shield(pending[1])
        lookup = asyncio.ensure_future(self._lookup(name, entry, now, generation))
        self._lookups[name] = (generation, lookup)
        lookup.add_done_callback(lambda done: self._lookup_done(name, done))
        return await asyncio.shield(lookup)

    def _lookup_done(self, name: str, lookup: asyncio.Future[_Entry]) -> None:
        if self._lookups.get(name, (0, None))[1] is lookup:
            del self._lookups[name]
        if not lookup.cancelled():
            lookup.exception()  # retrieved: its waiters may all have gone

    async def _lookup(self, name: str, entry: _Entry | None, now: float, generation: int) -> _Entry:
        try:
            info = await self._adapters.get_adapter(name)
        except DatabaseUnavailable:
            if entry is None:
                raise
            if not self._serving_stale:
                self._serving_stale = True
                logger.warning("database unavailable: routing from the last known snapshots")
            if self._entries.get(name) is entry:  # not forgotten meanwhile (a promotion)
                # keep it, and ask again only after another ttl_s (no lookup per request)
                self._entries[name] = _Entry(now, entry.versions, entry.shares)
            return entry
        if self._serving_stale:
            self._serving_stale = False
            logger.warning("database available again: routing snapshots refreshed")
        entry = _entry(info, now)
        if self._forgotten.get(name, 0) == generation:
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


class VersionDeleted:
    """The adapter service's version-deleted listener: route the adapter afresh at once (the
    deleted version is no longer chosen or accepted), then make every vLLM replica forget the
    deleted ``name@version`` (``invalidate``), so that a version registered later under the same
    string is resolved again instead of served from the deleted weights vLLM still holds."""

    def __init__(
        self, versions: VersionTable, invalidate: Callable[[str], Awaitable[None]]
    ) -> None:
        self._versions = versions
        self._invalidate = invalidate

    async def __call__(self, served_name: str) -> None:
        self._versions.forget(served_name_or_not_found(served_name).name)
        await self._invalidate(served_name)
