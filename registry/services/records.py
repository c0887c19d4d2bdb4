"""Plain, immutable results handed out by the services (never ORM objects)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import overload

from hi_moe_lora.control_api import ResolvedAdapter
from hi_moe_lora.served_names import format_served_name
from registry.db.models import Adapter, AdapterVersion
from registry.services import traffic


@overload
def as_utc(moment: datetime) -> datetime: ...
@overload
def as_utc(moment: None) -> None: ...
def as_utc(moment: datetime | None) -> datetime | None:
    """SQLite returns naive datetimes; everything we store is UTC."""
    if moment is not None and moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment


@dataclass(frozen=True)
class AdapterVersionInfo:
    name: str
    version: str
    served_name: str
    lora_int_id: int
    source_uri: str
    local_path: str
    sha256: str
    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    variant: str
    domains: tuple[str, ...]
    base_model: str
    created_at: datetime
    previous_version: str | None
    status: str
    is_active: bool
    traffic_weight: float
    # share of the adapter's requests this version gets (active: the remainder of the weights)
    traffic_share: float
    avg_latency_ms: float | None
    success_rate: float | None
    request_count: int
    success_count: int
    last_used_at: datetime | None


@dataclass(frozen=True)
class AdapterInfo:
    name: str
    description: str | None
    created_at: datetime
    active_version: str | None
    domains: tuple[str, ...]
    versions: tuple[AdapterVersionInfo, ...]
    dispatch_keywords: tuple[str, ...] = ()
    dispatch_exemplars: tuple[str, ...] = ()


def traffic_shares(versions: list[AdapterVersion]) -> dict[int, float]:
    """Requests share per version id (see :mod:`registry.services.traffic`)."""
    by_version = traffic.shares(
        [traffic.Arm(v.version, v.traffic_weight, v.is_active) for v in versions]
    )
    return {v.id: by_version[v.version] for v in versions}


def version_info(
    adapter_name: str, row: AdapterVersion, traffic_share: float
) -> AdapterVersionInfo:
    created_at = as_utc(row.created_at)
    return AdapterVersionInfo(
        name=adapter_name,
        version=row.version,
        served_name=format_served_name(adapter_name, row.version),
        lora_int_id=row.lora_int_id,
        source_uri=row.source_uri,
        local_path=row.local_path,
        sha256=row.sha256,
        rank=row.rank,
        alpha=row.alpha,
        target_modules=tuple(row.target_modules),
        variant=row.variant,
        domains=tuple(row.domains),
        base_model=row.base_model,
        created_at=created_at,
        previous_version=row.previous_version,
        status=row.status,
        is_active=row.is_active,
        traffic_weight=row.traffic_weight,
        traffic_share=traffic_share,
        avg_latency_ms=row.avg_latency_ms,
        success_rate=row.success_rate,
        request_count=row.request_count,
        success_count=row.success_count,
        last_used_at=as_utc(row.last_used_at),
    )


def adapter_info(adapter: Adapter) -> AdapterInfo:
    rows = list(adapter.versions)
    shares = traffic_shares(rows)
    versions = tuple(version_info(adapter.name, row, shares.get(row.id, 0.0)) for row in rows)
    active = next((v for v in versions if v.is_active), None)
    created_at = as_utc(adapter.created_at)
    return AdapterInfo(
        name=adapter.name,
        description=adapter.description,
        created_at=created_at,
        active_version=active.version if active else None,
        domains=active.domains if active else (versions[-1].domains if versions else ()),
        versions=versions,
        dispatch_keywords=tuple(adapter.dispatch_keywords),
        dispatch_exemplars=tuple(adapter.dispatch_exemplars),
    )


def resolved(adapter_name: str, row: AdapterVersion) -> ResolvedAdapter:
    return ResolvedAdapter(
        name=adapter_name,
        version=row.version,
        served_name=format_served_name(adapter_name, row.version),
        lora_int_id=row.lora_int_id,
        local_path=row.local_path,
        sha256=row.sha256,
        rank=row.rank,
        alpha=row.alpha,
        variant=row.variant,
        base_model=row.base_model,
    )
