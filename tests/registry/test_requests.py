"""The request log: statistics per version, request records, feedback once per request."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import update

from registry.db.engine import make_engine
from registry.db.models import RequestRecord
from registry.db.session import Database
from registry.errors import NotFoundError
from registry.services.adapters import AdapterService
from registry.services.artifacts import ArtifactStore
from registry.services.requests import FinishedRequest, RequestLog
from registry.services.sources import SourcePolicy
from registry.settings import ControlPlaneSettings
from tests.registry.conftest import AdapterFactory


@pytest.fixture
def database(settings: ControlPlaneSettings) -> Iterator[Database]:
    database = Database(make_engine(settings.database_url))
    yield database
    database.dispose()


@pytest.fixture
def adapters(database: Database, settings: ControlPlaneSettings) -> AdapterService:
    return AdapterService(
        database,
        ArtifactStore(settings.artifact_dir),
        base_model=settings.base_model,
        max_lora_rank=settings.max_lora_rank,
        sources=SourcePolicy(settings.source_roots),
    )


def _done(
    request_id: str, served: str, latency_ms: float = 10.0, ok: bool = True
) -> FinishedRequest:
    return FinishedRequest(request_id, served, "@" in served, latency_ms, ok)


async def test_outcomes_keep_running_statistics(
    database: Database, adapters: AdapterService, make_adapter: AdapterFactory
) -> None:
    await adapters.register("stat-lora", "1.0.0", str(make_adapter("a")))
    await adapters.register("stat-lora", "1.1.0", str(make_adapter("b", seed=1)))
    log = RequestLog(database)
    await log.record([_done("r1", "stat-lora@1.0.0", 100.0)])
    await log.record([_done("r2", "stat-lora@1.0.0", 200.0, ok=False)])
    await log.record([_done("r3", "stat-lora@1.0.0", 200.0)])
    await log.record([_done("r4", "stat-lora@9.0.0", 1.0)])  # unknown version: no statistics
    info = await adapters.get_version("stat-lora", "1.0.0")
    assert (info.request_count, info.success_count) == (3, 2)
    assert info.avg_latency_ms == pytest.approx(100 + 0.1 * 100 + 0.1 * (200 - 110))
    assert info.success_rate == pytest.approx(0.9 + 0.1 * (1 - 0.9))
    assert info.last_used_at is not None
    assert info.last_used_at.tzinfo is not None
    untouched = await adapters.get_version("stat-lora", "1.1.0")
    assert (untouched.request_count, untouched.avg_latency_ms) == (0, None)


async def test_a_batch_equals_recording_one_by_one(
    database: Database, adapters: AdapterService, make_adapter: AdapterFactory
) -> None:
    await adapters.register("one-lora", "1.0.0", str(make_adapter("a")))
    await adapters.register("batch-lora", "1.0.0", str(make_adapter("b", seed=1)))
    log = RequestLog(database)
    outcomes = [(10.0 * (i + 1), i % 3 != 0) for i in range(12)]
    for i, (latency, ok) in enumerate(outcomes):
        await log.record([_done(f"one-{i}", "one-lora@1.0.0", latency, ok)])
    await log.record(
        [_done(f"b-{i}", "batch-lora@1.0.0", lat, ok) for i, (lat, ok) in enumerate(outcomes)]
    )
    one = await adapters.get_version("one-lora", "1.0.0")
    batch = await adapters.get_version("batch-lora", "1.0.0")
    assert (batch.request_count, batch.success_count) == (one.request_count, one.success_count)
    assert batch.avg_latency_ms == pytest.approx(one.avg_latency_ms)
    assert batch.success_rate == pytest.approx(one.success_rate)


async def test_concurrent_batches_lose_nothing(
    database: Database, adapters: AdapterService, make_adapter: AdapterFactory
) -> None:
    await adapters.register("busy-lora", "1.0.0", str(make_adapter("a")))
    log = RequestLog(database)
    await asyncio.gather(
        *(log.record([_done(f"c{i}", "busy-lora@1.0.0", 10.0, i % 2 == 0)]) for i in range(40))
    )
    info = await adapters.get_version("busy-lora", "1.0.0")
    assert (info.request_count, info.success_count) == (40, 20)


async def test_feedback_moves_the_success_rate_once_per_request(
    database: Database, adapters: AdapterService, make_adapter: AdapterFactory
) -> None:
    await adapters.register("fb-lora", "1.0.0", str(make_adapter("a")))
    log = RequestLog(database)
    await log.record([_done("good", "fb-lora@1.0.0"), _done("bad", "fb-lora@1.0.0")])
    assert (await adapters.get_version("fb-lora", "1.0.0")).success_rate == pytest.approx(1.0)

    first = await log.feedback("bad", False)
    assert (first.served_name, first.success, first.recorded) == ("fb-lora@1.0.0", False, True)
    rate = (await adapters.get_version("fb-lora", "1.0.0")).success_rate
    assert rate == pytest.approx(0.9)
    again = await log.feedback("bad", True)  # idempotent: the first verdict stands
    assert (again.success, again.recorded) == (False, False)
    assert (await adapters.get_version("fb-lora", "1.0.0")).success_rate == pytest.approx(rate)
    counts = await adapters.get_version("fb-lora", "1.0.0")
    assert (counts.request_count, counts.success_count) == (2, 2)  # HTTP outcomes unchanged


async def test_feedback_for_the_base_model_is_kept_without_statistics(
    database: Database,
) -> None:
    log = RequestLog(database)
    await log.record([_done("base-1", "/models/base")])
    result = await log.feedback("base-1", True)
    assert (result.served_name, result.recorded) == ("/models/base", True)


async def test_unknown_and_expired_request_ids_are_not_found(database: Database) -> None:
    log = RequestLog(database, feedback_window_s=3600)
    with pytest.raises(NotFoundError) as unknown:
        await log.feedback("never-served", True)
    assert unknown.value.code == "request_not_found"
    await log.record([_done("old", "/models/base")])
    long_ago = datetime.now(timezone.utc) - timedelta(hours=2)
    with database.engine.begin() as connection:
        connection.execute(update(RequestRecord).values(created_at=long_ago))
    await log.record([_done("new", "/models/base")])  # each batch purges past the window
    with pytest.raises(NotFoundError):
        await log.feedback("old", True)
    assert (await log.feedback("new", True)).recorded


async def test_a_request_id_recorded_twice_keeps_its_first_record(database: Database) -> None:
    log = RequestLog(database)
    await log.record([_done("dup", "/models/base")])
    await log.record([_done("dup", "/models/other")])
    assert (await log.feedback("dup", True)).served_name == "/models/base"
