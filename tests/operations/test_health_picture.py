"""The health picture's status rules and its JSON form."""

from __future__ import annotations

from datetime import datetime, timezone

from registry.operations.health_picture import (
    AdapterHealth,
    FleetHealth,
    ForeignBinding,
    UpstreamHealth,
)

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


def test_a_foreign_binding_left_bound_degrades_the_fleet_and_is_shown() -> None:
    held = ForeignBinding("a@1.0.0", "bound to weights the registry did not issue", False, NOW)
    removed = ForeignBinding("a@1.0.0", "bound to weights the registry did not issue", True, NOW)
    still = UpstreamHealth("http://a", True, foreign=(held,), outside=("Team/Model",))
    gone = UpstreamHealth("http://a", True, foreign=(removed,))
    assert FleetHealth((still,)).status == "degraded"
    assert FleetHealth((gone,)).status == "ok"
    upstream = FleetHealth((still,)).as_json()["upstreams"][0]
    assert upstream["foreign_bindings"] == [
        {
            "served_name": "a@1.0.0",
            "reason": "bound to weights the registry did not issue",
            "removed": False,
            "checked_at": NOW.isoformat(),
        }
    ]
    assert upstream["other_adapters"] == ["Team/Model"]
