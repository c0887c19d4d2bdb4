"""AdapterService: concurrency, listeners, A/B choice, statistics, restarts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from hi_moe_lora.adapters.checksum import adapter_sha256
from registry.db.engine import make_engine
from registry.db.session import Database
from registry.errors import ConflictError, NotFoundError
from registry.services.adapters import AdapterService
from registry.services.artifacts import ArtifactStore
from registry.services.sources import SourcePolicy
from registry.settings import ControlPlaneSettings
from tests.registry.conftest import AdapterFactory


def _service(settings: ControlPlaneSettings) -> AdapterService:
    return AdapterService(
        Database(make_engine(settings.database_url)),
        ArtifactStore(settings.artifact_dir),
        base_model=settings.base_model,
        max_lora_rank=settings.max_lora_rank,
        sources=SourcePolicy(settings.source_roots),
    )


@pytest.fixture
def service(settings: ControlPlaneSettings) -> Iterator[AdapterService]:
    adapters = _service(settings)
    yield adapters
    adapters.database.dispose()


async def test_concurrent_registrations_get_distinct_ids(
    service: AdapterService, make_adapter: AdapterFactory
) -> None:
    sources = [make_adapter(f"s{i}", seed=i) for i in range(8)]
    infos = await asyncio.gather(
        *(service.register(f"lora-{i}", "1.0.0", str(src)) for i, src in enumerate(sources))
    )
    assert sorted(info.lora_int_id for info in infos) == list(range(1, 9))
    assert all(info.is_active for info in infos)


async def test_concurrent_versions_of_one_adapter_keep_one_active(
    service: AdapterService, make_adapter: AdapterFactory
) -> None:
    sources = [make_adapter(f"v{i}", seed=i) for i in range(6)]
    infos = await asyncio.gather(
        *(service.register("race-lora", f"1.{i}.0", str(src)) for i, src in enumerate(sources))
    )
    assert sorted(info.lora_int_id for info in infos) == list(range(1, 7))
    assert sum(info.is_active for info in infos) == 1
    adapter = await service.get_adapter("race-lora")
    assert len(adapter.versions) == 6
    assert [v.is_active for v in adapter.versions].count(True) == 1


async def test_concurrent_duplicates_register_once(
    service: AdapterService, make_adapter: AdapterFactory, artifact_dir: Path
) -> None:
    sources = [make_adapter(f"d{i}", seed=i) for i in range(4)]
    results = await asyncio.gather(
        *(service.register("dup-lora", "1.0.0", str(src)) for src in sources),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(e, ConflictError) for e in losers), losers
    assert {e.code for e in losers if isinstance(e, ConflictError)} <= {
        "version_exists",
        "integrity_conflict",
    }
    published = winners[0]
    assert adapter_sha256(Path(published.local_path)) == published.sha256


async def test_ids_survive_a_restart(
    settings: ControlPlaneSettings, make_adapter: AdapterFactory
) -> None:
    first = _service(settings)
    await first.register("a-lora", "1.0.0", str(make_adapter("a")))
    await first.register("a-lora", "1.1.0", str(make_adapter("b", seed=1)))
    await first.delete("a-lora", "1.1.0")
    first.database.dispose()

    second = _service(settings)  # a new engine on the same database
    info = await second.register("b-lora", "1.0.0", str(make_adapter("c", seed=2)))
    assert info.lora_int_id == 3
    second.database.dispose()


async def test_rollback_to_a_deleted_version_is_refused(
    service: AdapterService, make_adapter: AdapterFactory
) -> None:
    await service.register("gone-lora", "1.0.0", str(make_adapter("a")))
    await service.register("gone-lora", "1.1.0", str(make_adapter("b", seed=1)))
    await service.promote("gone-lora", "1.1.0")
    await service.delete("gone-lora", "1.0.0")
    assert [v.version for v in (await service.get_adapter("gone-lora")).versions] == ["1.1.0"]
    with pytest.raises(ConflictError) as caught:
        await service.rollback("gone-lora")  # its previous version was deleted
    assert caught.value.code == "rollback_target_missing"
    assert (await service.resolve("gone-lora")).version == "1.1.0"


async def test_listeners_hear_promote_and_rollback(
    service: AdapterService, make_adapter: AdapterFactory
) -> None:
    heard: list[str] = []

    async def listener(name: str) -> None:
        heard.append(name)

    async def broken(name: str) -> None:
        raise RuntimeError("vLLM is down")

    service.add_active_changed_listener(broken)
    service.add_active_changed_listener(listener)
    await service.register("hook-lora", "1.0.0", str(make_adapter("a")))
    await service.register("hook-lora", "2.0.0", str(make_adapter("b", seed=1)))
    assert heard == []
    await service.promote("hook-lora", "2.0.0")
    await service.promote("hook-lora", "2.0.0")  # already active: nothing changes
    await service.rollback("hook-lora")
    assert heard == ["hook-lora", "hook-lora"]
    assert (await service.resolve("hook-lora")).version == "1.0.0"


async def test_traffic_split_sets_each_versions_share(
    service: AdapterService, make_adapter: AdapterFactory
) -> None:
    for index, version in enumerate(["1.0.0", "1.1.0", "1.2.0"]):
        await service.register("ab-lora", version, str(make_adapter(version, seed=index)))

    async def shares() -> dict[str, float]:
        info = await service.get_adapter("ab-lora")
        return {v.version: v.traffic_share for v in info.versions}

    assert await shares() == {"1.0.0": 1.0, "1.1.0": 0.0, "1.2.0": 0.0}
    await service.set_traffic("ab-lora", {"1.1.0": 0.3, "1.2.0": 0.1})
    assert await shares() == pytest.approx({"1.0.0": 0.6, "1.1.0": 0.3, "1.2.0": 0.1})
    await service.set_traffic("ab-lora", {})  # the split replaces the previous one
    assert await shares() == {"1.0.0": 1.0, "1.1.0": 0.0, "1.2.0": 0.0}


async def test_resolve_errors(service: AdapterService, make_adapter: AdapterFactory) -> None:
    await service.register("only-lora", "1.0.0", str(make_adapter("a")))
    with pytest.raises(NotFoundError) as missing_version:
        await service.resolve("only-lora@2.0.0")
    assert missing_version.value.code == "version_not_found"
    with pytest.raises(NotFoundError) as missing_adapter:
        await service.resolve("nobody")
    assert missing_adapter.value.code == "adapter_not_found"
