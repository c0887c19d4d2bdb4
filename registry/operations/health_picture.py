"""The health monitor's picture: each upstream and each served version on it, as last checked,
with the LoRA names it found bound to foreign weights and those outside the registry's namespace.

Frozen values the monitor replaces whole after each check, read by readiness, ``/v1/health`` and
warm-up; :meth:`FleetHealth.as_json` is the ``GET /v1/health`` answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal


@dataclass(frozen=True)
class AdapterHealth:
    adapter: str
    version: str
    served_name: str
    healthy: bool
    reason: str | None
    latency_ms: float | None
    checked_at: datetime


@dataclass(frozen=True)
class ForeignBinding:
    """A served name in the registry's namespace that a replica bound to weights the registry did
    not issue (or a name it does not know), and what the monitor did about it."""

    served_name: str
    reason: str
    #: ``True``: vLLM confirmed the unload (or no longer had it); ``False``: still bound.
    removed: bool
    checked_at: datetime


@dataclass(frozen=True)
class UpstreamHealth:
    url: str
    up: bool | None  # None: not checked yet
    reason: str | None = None
    checked_at: datetime | None = None
    latency_ms: float | None = None
    base_model: str | None = None
    adapters: tuple[AdapterHealth, ...] = ()
    #: Foreign bindings found in the last check (unloaded at once; ``removed`` says whether it
    #: worked).
    foreign: tuple[ForeignBinding, ...] = ()
    #: Loaded LoRA names outside the registry's namespace (not ``name``/``name@version``): left
    #: alone, shown here.
    outside: tuple[str, ...] = ()


@dataclass(frozen=True)
class FleetHealth:
    upstreams: tuple[UpstreamHealth, ...]

    @property
    def status(self) -> Literal["unknown", "down", "degraded", "ok"]:
        """``ok``: every upstream and version healthy, no foreign binding left; ``down``: no
        upstream up."""
        if all(u.up is None for u in self.upstreams):
            return "unknown"
        if not any(u.up for u in self.upstreams):
            return "down"
        healthy = (
            all(u.up for u in self.upstreams)
            and all(a.healthy for u in self.upstreams for a in u.adapters)
            and all(f.removed for u in self.upstreams for f in u.foreign)
        )
        return "ok" if healthy else "degraded"

    def as_json(self) -> dict[str, Any]:
        """The picture as ``GET /v1/health`` answers it."""

        def moment(value: datetime | None) -> str | None:
            return value.isoformat() if value is not None else None

        return {
            "status": self.status,
            "upstreams": [
                {
                    "url": u.url,
                    "up": u.up,
                    "reason": u.reason,
                    "checked_at": moment(u.checked_at),
                    "latency_ms": u.latency_ms,
                    "base_model": u.base_model,
                    "adapters": [
                        {
                            "adapter": a.adapter,
                            "version": a.version,
                            "served_name": a.served_name,
                            "healthy": a.healthy,
                            "reason": a.reason,
                            "latency_ms": a.latency_ms,
                            "checked_at": moment(a.checked_at),
                        }
                        for a in u.adapters
                    ],
                    "foreign_bindings": [
                        {
                            "served_name": f.served_name,
                            "reason": f.reason,
                            "removed": f.removed,
                            "checked_at": moment(f.checked_at),
                        }
                        for f in u.foreign
                    ],
                    "other_adapters": list(u.outside),
                }
                for u in self.upstreams
            ],
        }
