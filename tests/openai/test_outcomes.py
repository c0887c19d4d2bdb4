"""Request outcomes reach the registry's statistics off the request path."""

from __future__ import annotations

from pathlib import Path

import pytest

from hi_moe_lora.served_names import parse_served_name
from registry.app import create_app
from registry.openai.outcomes import MAX_PENDING, Outcome, OutcomeRecorder
from registry.openai.targets import Target
from registry.services.adapters import AdapterService
from tests.openai.live import control_plane_settings
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter


@pytest.fixture
async def service(tmp_path: Path) -> AdapterService:
    settings = control_plane_settings(tmp_path, DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"])
    adapters = create_app(settings).components.adapters
    await adapters.register("stats", "1.0.0", str(write_adapter(tmp_path / "src")))
    return adapters


def _outcome(served: str, status: int, latency_ms: float = 10.0) -> Outcome:
    parsed = parse_served_name(served)
    assert parsed is not None
    target = Target(served, served, parsed.name, parsed.version)
    return Outcome(target, "/v1/completions", status, latency_ms, stream=False)


async def test_outcomes_update_the_versions_statistics(service: AdapterService) -> None:
    recorder = OutcomeRecorder(service)
    recorder.record(_outcome("stats@1.0.0", 200, 10.0))
    recorder.record(_outcome("stats@1.0.0", 503, 30.0))
    await recorder.drain()
    info = await service.get_version("stats", "1.0.0")
    assert info.request_count == 2
    assert info.success_count == 1
    assert info.avg_latency_ms is not None
    assert 10.0 <= info.avg_latency_ms <= 30.0
    assert info.last_used_at is not None


async def test_base_model_requests_are_not_recorded(service: AdapterService) -> None:
    recorder = OutcomeRecorder(service)
    recorder.record(Outcome(Target("base", "base"), "/v1/completions", 200, 1.0, stream=False))
    assert recorder.pending == 0


async def test_a_failing_write_is_logged_not_raised(
    service: AdapterService, caplog: pytest.LogCaptureFixture
) -> None:
    with service.database.engine.begin() as connection:  # the statistics write will fail
        connection.exec_driver_sql("ALTER TABLE adapter_versions RENAME TO moved_away")
    recorder = OutcomeRecorder(service)
    recorder.record(_outcome("stats@1.0.0", 200))
    await recorder.drain()
    assert any("could not record 1 outcomes" in r.getMessage() for r in caplog.records)


async def test_recording_does_not_wait_for_the_write(service: AdapterService) -> None:
    recorder = OutcomeRecorder(service)
    recorder.record(_outcome("stats@1.0.0", 200))
    assert recorder.pending == 1  # handed to a task, not awaited by the caller
    await recorder.drain()
    assert recorder.pending == 0


async def test_backlog_is_bounded(service: AdapterService) -> None:
    recorder = OutcomeRecorder(service, max_pending=4)
    for _ in range(10):
        recorder.record(_outcome("stats@1.0.0", 200))
    assert recorder.pending == 4
    await recorder.drain()
    info = await service.get_version("stats", "1.0.0")
    assert info.request_count == 4
    assert MAX_PENDING >= 100


async def test_a_flush_writes_the_whole_batch_in_one_transaction(
    service: AdapterService,
) -> None:
    recorder = OutcomeRecorder(service, flush_interval_s=60)
    for status in (200, 200, 500, 200, 200):
        recorder.record(_outcome("stats@1.0.0", status))
    recorder.record(_outcome("stats@9.9.9", 200))  # a version that does not exist is skipped
    await recorder.drain()
    info = await service.get_version("stats", "1.0.0")
    assert info.request_count == 5
    assert info.success_count == 4
