"""Building the registry's version and adapter records for the operations tests."""

from __future__ import annotations

from datetime import datetime, timezone

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
