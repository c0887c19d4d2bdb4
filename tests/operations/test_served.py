"""Which versions are served (active, or with a traffic share) and in which order warm-up picks
them (most recently used first)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from registry.operations.served import by_recent_use, served_versions
from registry.services.records import AdapterInfo, AdapterVersionInfo

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)


def version(
    name: str,
    number: str,
    *,
    active: bool = False,
    share: float = 0.0,
    requests: int = 0,
    last_used: datetime | None = None,
) -> AdapterVersionInfo:
    return AdapterVersionInfo(
        name=name,
        version=number,
        served_name=f"{name}@{number}",
        lora_int_id=1,
        source_uri="file:///x",
        local_path="/x",
        sha256="0" * 64,
        rank=8,
        alpha=16.0,
        target_modules=("q_proj",),
        variant="lora",
        domains=(),
        base_model="m",
        created_at=NOW,
        previous_version=None,
        status="active" if active else "inactive",
        is_active=active,
        traffic_weight=share,
        traffic_share=share if not active else 1.0 - share,
        avg_latency_ms=None,
        success_rate=None,
        request_count=requests,
        success_count=requests,
        last_used_at=last_used,
    )


def adapter(name: str, *versions: AdapterVersionInfo) -> AdapterInfo:
    return AdapterInfo(
        name=name,
        description=None,
        created_at=NOW,
        active_version=next((v.version for v in versions if v.is_active), None),
        domains=(),
        versions=versions,
    )


def test_served_versions_are_the_active_ones_and_ab_candidates() -> None:
    fleet = [
        adapter(
            "a",
            version("a", "1.0.0"),  # retired: not served
            version("a", "1.1.0", share=0.2),  # candidate with a share
            version("a", "2.0.0", active=True),
        ),
        adapter("b", version("b", "1.0.0")),  # nothing active
    ]
    assert [v.served_name for v in served_versions(fleet)] == ["a@2.0.0", "a@1.1.0"]


def test_recent_use_orders_the_plan() -> None:
    old = version("old", "1.0.0", active=True, requests=500, last_used=NOW - timedelta(days=3))
    recent = version("recent", "1.0.0", active=True, requests=2, last_used=NOW)
    naive_recent = version(  # SQLite hands back naive UTC times
        "naive", "1.0.0", active=True, last_used=(NOW - timedelta(hours=1)).replace(tzinfo=None)
    )
    never_busy = version("never-busy", "1.0.0", active=True, requests=9)
    never = version("never", "1.0.0", active=True)
    ordered = by_recent_use([never, old, never_busy, naive_recent, recent])
    assert [v.name for v in ordered] == ["recent", "naive", "old", "never-busy", "never"]
