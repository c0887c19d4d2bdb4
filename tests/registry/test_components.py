"""The components' life cycle: started in dependency order, stopped in reverse, always."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.app import create_app
from registry.db import migrate
from registry.errors import SchemaNotAtHeadError
from registry.openai.outcomes import Outcome
from registry.openai.targets import Target
from registry.settings import ControlPlaneSettings
from tests.registry.conftest import AdapterFactory


async def test_refuses_to_start_on_a_downgraded_database_and_still_disposes(
    migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrate.downgrade(migrated_url, "base")  # e.g. someone restored an old backup
    components = create_app(
        ControlPlaneSettings(database_url=migrated_url, artifact_dir=tmp_path)
    ).components
    disposed: list[bool] = []
    monkeypatch.setattr(components.database, "dispose", lambda: disposed.append(True))
    with pytest.raises(SchemaNotAtHeadError):
        async with components.running():
            pytest.fail("started on a database that is not at head")
    assert disposed == [True]


async def test_stop_writes_buffered_outcomes_and_closes_the_upstream_client(
    settings: ControlPlaneSettings, make_adapter: AdapterFactory
) -> None:
    components = create_app(settings).components
    await components.adapters.register("life-lora", "1.0.0", str(make_adapter("a")))
    target = Target("life-lora", "life-lora@1.0.0", "life-lora", "1.0.0")
    async with components.running():
        client = components.upstreams.client  # opened on first use, like a request would
        components.outcomes.record(
            Outcome("req-1", target, "/v1/completions", 200, 5.0, stream=False)
        )
        assert components.outcomes.pending == 1
    assert client.closed
    info = await components.adapters.get_version("life-lora", "1.0.0")
    assert info.request_count == 1
