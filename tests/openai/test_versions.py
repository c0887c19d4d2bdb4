"""VersionTable: the A/B-aware version choice, cached briefly and dropped on promotion."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from registry.app import create_app
from registry.errors import NotFoundError
from registry.openai.versions import ActiveVersionChanged, ServedVersion, VersionTable
from registry.services.adapters import AdapterService
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
