"""Pydantic request/response schemas of the admin API (separate from the tables)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class RegisterVersionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str = Field(min_length=1, max_length=128, examples=["1.2.0"])
    source: str = Field(min_length=1, description="local directory path or file:// URI")
    domains: list[str] = Field(default_factory=list)
    description: str | None = None


class TrafficIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weights: dict[str, float] = Field(
        description="version -> fraction of requests; the active version gets the remainder"
    )


class AdapterVersionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    version: str
    served_name: str
    lora_int_id: int
    source_uri: str
    local_path: str
    sha256: str
    rank: int
    alpha: float
    target_modules: list[str]
    variant: str
    domains: list[str]
    base_model: str
    created_at: datetime
    previous_version: str | None
    status: str
    is_active: bool
    traffic_weight: float
    traffic_share: float
    avg_latency_ms: float | None
    success_rate: float | None
    request_count: int
    success_count: int
    last_used_at: datetime | None


class AdapterOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    description: str | None
    created_at: datetime
    active_version: str | None
    domains: list[str]
    versions: list[AdapterVersionOut]
    dispatch_keywords: list[str]
    dispatch_exemplars: list[str]


class DispatchHintsIn(BaseModel):
    """A specialist's own keywords and exemplar tasks for the dispatcher (replaces the old)."""

    model_config = ConfigDict(extra="forbid")

    keywords: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=200
    )
    exemplars: list[Annotated[str, Field(min_length=1, max_length=1_000)]] = Field(
        default_factory=list, max_length=100
    )


class AdapterListOut(BaseModel):
    adapters: list[AdapterOut]


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    code: str
    errors: list[dict[str, object]] | None = None


class RoutingGapOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    created_at: datetime
    task_excerpt: str
    context_refs: list[str]
    extracted_domains: list[str]
    terms: list[str]
    tier_scores: dict[str, float]
    nearest_domain: str | None
    nearest_score: float | None
    reason: str
    request_id: str | None


class RoutingGapPageOut(BaseModel):
    total: int
    limit: int
    offset: int
    gaps: list[RoutingGapOut]


class CountOut(BaseModel):
    value: str
    count: int


class RoutingGapSummaryOut(BaseModel):
    gaps: int
    terms: list[CountOut]
    nearest_domains: list[CountOut]


class SpecialistOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    domains: list[str]
    keywords: list[str]
    exemplars: int = Field(description="how many exemplar tasks it has of its own")
    success_rate: float | None
    request_count: int


class DispatcherStatusOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    embeddings: bool = Field(description="whether tier 3 (embeddings) runs")
    embeddings_reason: str
    specialists: list[SpecialistOut]


class WarmUpIn(BaseModel):
    """``adapters``: names (the versions each serves) or ``name@version``; none: the plan."""

    model_config = ConfigDict(extra="forbid")

    adapters: list[str] | None = Field(default=None, min_length=1, max_length=256)


class WarmTargetOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    adapter: str
    version: str
    served_name: str


class WarmResultOut(BaseModel):
    adapter: str
    version: str
    served_name: str
    upstream: str
    outcome: str
    time_ms: float
    load_ms: float | None
    detail: str | None


class WarmUpOut(BaseModel):
    reason: str
    started_at: datetime
    time_ms: float
    targets: list[WarmTargetOut]
    upstreams: list[str]
    loaded: int
    failed: int
    results: list[WarmResultOut]
