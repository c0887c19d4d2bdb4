"""The health picture's status rules and its JSON form."""

from __future__ import annotations

from datetime import datetime, timezone

from registry.operations.health_picture import AdapterHealth, FleetHealth, UpstreamHealth

NOW = datetime(2026, 11, 23, tzinfo=timezone.utc)


def _adapter(healthy: bool) -> AdapterHealth:
    return AdapterHealth("a", "1.0.0", "a@1.0.0", healthy, None if healthy else "x", 1.0, NOW)


def test_fleet_status_rules() -> None:
    up = UpstreamHealth("http://a", True, adapters=(_adapter(True),))
    sick = UpstreamHealth("http://a", True, adapters=(_adapter(False),))
    down = UpstreamHealth("http://b", False, "ConnectError")
    unchecked = UpstreamHealth("http://b", None)
    assert FleetHealth((unchecked,)).status == "unknown"
    assert FleetHealth((up,)).status == "ok"
    assert FleetHealth((sick,)).status == "degraded"
    assert FleetHealth((up, down)).status == "degraded"
    assert FleetHealth((down,)).status == "down"
    picture = FleetHealth((sick,)).as_json()
    assert picture["upstreams"][0]["adapters"][0]["reason"] == "x"
