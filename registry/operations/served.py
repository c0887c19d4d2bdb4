"""The adapter versions the front door really serves: what warm-up loads and health probes.

A version is served when it is its adapter's active version or an A/B candidate with a share of
the traffic. :func:`by_recent_use` orders them the way warm-up picks its plan:
most recently used first, then most used, active versions before candidates.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone

from registry.services.records import AdapterInfo, AdapterVersionInfo, as_utc

_NEVER = datetime.min.replace(tzinfo=timezone.utc)


def served_versions(adapters: Iterable[AdapterInfo]) -> list[AdapterVersionInfo]:
    """Every version that gets traffic, adapter by adapter (active version first)."""
    served: list[AdapterVersionInfo] = []
    for adapter in adapters:
        versions = [v for v in adapter.versions if v.is_active or v.traffic_share > 0]
        served.extend(sorted(versions, key=lambda v: (not v.is_active, v.version)))
    return served


def by_recent_use(versions: Iterable[AdapterVersionInfo]) -> list[AdapterVersionInfo]:
    """Most recently used first, then most requests, active before candidates, then by name."""

    def key(v: AdapterVersionInfo) -> tuple[float, int, bool, str]:
        last = as_utc(v.last_used_at) if v.last_used_at is not None else _NEVER
        return (-last.timestamp(), -v.request_count, not v.is_active, v.served_name)

    return sorted(versions, key=key)
