"""VersionTable: the A/B-aware version choice, cached briefly and dropped on promotion."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from registry.app import create_app
from registry.errors import DatabaseUnavailable, NotFoundError
from registry.openai.versions import (
    ActiveVersionChanged,
    ServedVersion,
    VersionDeleted,
    VersionTable,
)
from registry.services.adapters import AdapterService
from registry.services.records import AdapterInfo
from tests.openai.live import control_plane_settings
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[AdapterService]:
    settings = control_plane_settings(tmp_path, DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"])
    app = create_app(settings)
    adapters = app.components.adapters
    for index, version in enumerate(("1.0.0", "2.0.0", "3.0.0")):
        source = write_adapter(tmp_path / f"s{index}", seed=index)
        await adapters.register("spec", version, str(source))
    yield adapters
    # no lifespan runs here: end the unloads promotions started, close their HTTP client
    await app.components.invalidator.stop()
    await app.components.upstreams.aclose()


def _v(version: str) -> ServedVersion:
    return ServedVersion("spec", version, f"spec@{version}")


async def test_bare_name_gets_the_active_version(service: AdapterService) -> None:
    assert await VersionTable(service).choose("spec") == _v("1.0.0")


async def test_pinned_versions(service: AdapterService) -> None:
    table = VersionTable(service)
    assert await table.choose("spec@3.0.0") == _v("3.0.0")
    with pytest.raises(NotFoundError):
        await table.choose("spec@9.0.0")
    with pytest.raises(NotFoundError):
        await table.choose("other@1.0.0")
    with pytest.raises(NotFoundError):
        await table.choose("other")


async def test_follows_the_registrys_traffic_shares(service: AdapterService) -> None:
    await service.set_traffic("spec", {"2.0.0": 0.25, "3.0.0": 0.25})
    table = VersionTable(service, rng=random.Random(7))
    counts = {v: 0 for v in ("1.0.0", "2.0.0", "3.0.0")}
    for _ in range(2000):
        counts[(await table.choose("spec")).version] += 1
    assert 900 < counts["1.0.0"] < 1100
    assert 400 < counts["2.0.0"] < 600
    assert 400 < counts["3.0.0"] < 600


async def test_snapshot_lives_ttl_seconds(service: AdapterService) -> None:
    clock = Clock()
    table = VersionTable(service, ttl_s=1.0, clock=clock)
    assert await table.choose("spec") == _v("1.0.0")
    await service.set_traffic("spec", {"2.0.0": 1.0})
    clock.now += 0.5
    assert await table.choose("spec") == _v("1.0.0")  # still the snapshot
    clock.now += 0.6
    assert await table.choose("spec") == _v("2.0.0")  # refreshed after the TTL


async def test_promotion_applies_to_the_very_next_request(service: AdapterService) -> None:
    table = VersionTable(service, ttl_s=3600.0)
    invalidated: list[str] = []

    async def invalidate(name: str) -> None:
        invalidated.append(name)

    service.add_active_changed_listener(ActiveVersionChanged(table, invalidate))
    assert await table.choose("spec") == _v("1.0.0")
    await service.promote("spec", "3.0.0")
    assert await table.choose("spec") == _v("3.0.0")
    await service.rollback("spec")
    assert await table.choose("spec") == _v("1.0.0")
    assert invalidated == ["spec", "spec"]  # the bare name, after each change


class DownableAdapters:
    """The real adapter service, whose database can be made unavailable (``down``)."""

    def __init__(self, service: AdapterService) -> None:
        self.service = service
        self.down = False
        self.lookups = 0

    async def get_adapter(self, name: str) -> AdapterInfo:
        self.lookups += 1
        if self.down:
            raise DatabaseUnavailable("the registry's database is unavailable (test)")
        return await self.service.get_adapter(name)


async def test_an_expired_snapshot_keeps_serving_while_the_database_is_down(
    service: AdapterService, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    adapters = DownableAdapters(service)
    table = VersionTable(cast(AdapterService, adapters), ttl_s=1.0, clock=clock)
    assert await table.choose("spec") == _v("1.0.0")
    adapters.down = True
    for _ in range(3):
        clock.now += 1.5  # expired
        assert await table.choose("spec") == _v("1.0.0")
        assert await table.choose("spec@2.0.0") == _v("2.0.0")
    assert adapters.lookups == 4  # one attempt per TTL, not one per request
    with pytest.raises(DatabaseUnavailable):  # never seen: nothing to serve it from
        await table.choose("other")
    adapters.down = False
    await service.set_traffic("spec", {"2.0.0": 1.0})
    clock.now += 1.5
    assert await table.choose("spec") == _v("2.0.0")  # back: fresh snapshots again
    messages = [r.getMessage() for r in caplog.records]
    assert sum("routing from the last known snapshots" in m for m in messages) == 1
    assert sum("routing snapshots refreshed" in m for m in messages) == 1


async def test_a_deleted_version_is_gone_for_the_very_next_request(
    service: AdapterService,
) -> None:
    table = VersionTable(service, ttl_s=3600.0)
    invalidated: list[str] = []

    async def invalidate(name: str) -> None:
        invalidated.append(name)

    service.add_version_deleted_listener(VersionDeleted(table, invalidate))
    await service.set_traffic("spec", {"2.0.0": 1.0})
    assert await table.choose("spec") == _v("2.0.0")
    assert await table.choose("spec@2.0.0") == _v("2.0.0")
    await service.delete("spec", "2.0.0")
    with pytest.raises(NotFoundError):
        await table.choose("spec@2.0.0")
    assert await table.choose("spec") == _v("1.0.0")
    assert invalidated == ["spec@2.0.0"]  # vLLM forgets the deleted name@version


class PausedAdapters:
    """The real adapter service, whose next lookup reads the registry and then waits."""

    def __init__(self, service: AdapterService) -> None:
        self.service = service
        self.read = asyncio.Event()
        self.go_on = asyncio.Event()

    async def get_adapter(self, name: str) -> AdapterInfo:
        info = await self.service.get_adapter(name)
        self.read.set()
        await self.go_on.wait()
        return info


async def test_a_lookup_older_than_a_change_is_not_kept(service: AdapterService) -> None:
    paused = PausedAdapters(service)
    table = VersionTable(cast(AdapterService, paused), ttl_s=3600.0)
    lookup = asyncio.create_task(table.choose("spec"))
    await paused.read.wait()  # it read 1.0.0 as active...
    await service.promote("spec", "3.0.0")
    table.forget("spec")  # ...and the promotion's listener ran before it finished
    paused.go_on.set()
    assert await lookup == _v("1.0.0")  # begun before the change: may see the old state
    assert await table.choose("spec") == _v("3.0.0")  # but did not keep it for later ones


class CountingAdapters(PausedAdapters):
    """Paused lookups, counted."""

    def __init__(self, service: AdapterService) -> None:
        super().__init__(service)
        self.lookups = 0

    async def get_adapter(self, name: str) -> AdapterInfo:
        self.lookups += 1
        return await super().get_adapter(name)


async def test_requests_in_flight_share_one_lookup(service: AdapterService) -> None:
    clock = Clock()
    adapters = CountingAdapters(service)
    table = VersionTable(cast(AdapterService, adapters), ttl_s=1.0, clock=clock)
    # never seen: 64 requests wait for the one lookup
    first = [asyncio.create_task(table.choose("spec")) for _ in range(64)]
    await adapters.read.wait()
    adapters.go_on.set()
    assert {await task for task in first} == {_v("1.0.0")}
    assert adapters.lookups == 1
    # expired: one request refreshes, the others are served the last snapshot meanwhile
    await service.set_traffic("spec", {"2.0.0": 1.0})
    clock.now += 1.5
    adapters.read.clear()
    adapters.go_on.clear()
    refresh = asyncio.create_task(table.choose("spec"))
    await adapters.read.wait()
    during = [await table.choose("spec") for _ in range(10)]
    assert during == [_v("1.0.0")] * 10
    adapters.go_on.set()
    assert await refresh == _v("2.0.0")
    assert await table.choose("spec") == _v("2.0.0")
    assert adapters.lookups == 2


async def test_a_failed_shared_lookup_fails_every_waiter(service: AdapterService) -> None:
    adapters = DownableAdapters(service)
    adapters.down = True
    table = VersionTable(cast(AdapterService, adapters), ttl_s=1.0)
    results = await asyncio.gather(
        *(table.choose("spec") for _ in range(8)), return_exceptions=True
    )
    assert all(isinstance(r, DatabaseUnavailable) for r in results)
    assert adapters.lookups == 1
    adapters.down = False
    assert await table.choose("spec") == _v("1.0.0")  # the failure was not kept
