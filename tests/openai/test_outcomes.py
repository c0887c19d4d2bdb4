"""Request outcomes reach the registry's statistics and request records off the request path."""

from __future__ import annotations

from pathlib import Path

import pytest

from hi_moe_lora.served_names import parse_served_name
from registry.app import create_app
from registry.components import Components
from registry.openai.outcomes import Outcome, OutcomeRecorder
from registry.openai.targets import Target
from tests.openai.live import control_plane_settings
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter


@pytest.fixture
async def components(tmp_path: Path) -> Components:
    settings = control_plane_settings(tmp_path, DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"])
    components = create_app(settings).components
    await components.adapters.register("stats", "1.0.0", str(write_adapter(tmp_path / "src")))
    return components


def _outcome(request_id: str, served: str, status: int, latency_ms: float = 10.0) -> Outcome:
    parsed = parse_served_name(served)
    if parsed is None or parsed.version is None:
        target = Target(served, served)
    else:
        target = Target(served, served, parsed.name, parsed.version)
    return Outcome(request_id, target, "/v1/completions", status, latency_ms, stream=False)


async def test_outcomes_update_statistics_and_can_take_feedback(components: Components) -> None:
    recorder = OutcomeRecorder(components.requests, flush_interval_s=60)
    recorder.record(_outcome("a", "stats@1.0.0", 200, 10.0))
    recorder.record(_outcome("b", "stats@1.0.0", 503, 30.0))
    recorder.record(_outcome("c", DEFAULT_BASE_MODEL, 200))
    assert recorder.pending == 3  # buffered, not written on the request path
    await recorder.drain()
    info = await components.adapters.get_version("stats", "1.0.0")
    assert (info.request_count, info.success_count) == (2, 1)
    assert info.avg_latency_ms is not None
    assert 10.0 <= info.avg_latency_ms <= 30.0
    # every request, the base model's included, can take feedback afterwards
    assert (await components.requests.feedback("c", True)).served_name == DEFAULT_BASE_MODEL
    assert (await components.requests.feedback("a", False)).recorded


async def test_a_failing_write_is_logged_not_raised(
    components: Components, caplog: pytest.LogCaptureFixture
) -> None:
    with components.database.engine.begin() as connection:  # the statistics write will fail
        connection.exec_driver_sql("ALTER TABLE adapter_versions RENAME TO moved_away")
    recorder = OutcomeRecorder(components.requests)
    recorder.record(_outcome("x", "stats@1.0.0", 200))
    await recorder.drain()
    assert any(
        "could not write 1 request outcome records" in r.getMessage() for r in caplog.records
    )
