"""Pydantic request/response schemas of the admin API (separate from the tables)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from registry.access.scopes import Scope

# Bounds of the admin API's request bodies (hostile input is refused with 422 before any work;
# a body over HI_MOE_LORA_MAX_BODY_BYTES never gets this far: 413). Text that is stored holds
# no NUL (PostgreSQL refuses it); one-line values hold no control character at all.
MAX_VERSION_CHARS = 128
MAX_SOURCE_CHARS = 4_096
MAX_DOMAINS = 64
MAX_DOMAIN_CHARS = 64
MAX_DESCRIPTION_CHARS = 2_000
MAX_TRAFFIC_VERSIONS = 64
MAX_KEYWORDS = 200
MAX_KEYWORD_CHARS = 64
MAX_EXEMPLARS = 100
MAX_EXEMPLAR_CHARS = 1_000
MAX_WARMUP_ADAPTERS = 256
MAX_SERVED_NAME_CHARS = 256
ONE_LINE = r"^[^\x00-\x1f\x7f]*$"
NO_NUL = r"^[^\x00]*$"

VersionText = Annotated[str, Field(min_length=1, max_length=MAX_VERSION_CHARS, pattern=ONE_LINE)]
Domain = Annotated[str, Field(min_length=1, max_length=MAX_DOMAIN_CHARS, pattern=ONE_LINE)]


class RegisterVersionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: VersionText = Field(examples=["1.2.0"])
    source: str = Field(
        min_length=1,
        max_length=MAX_SOURCE_CHARS,
        pattern=ONE_LINE,
        description="local directory path or file:// URI",
    )
    domains: list[Domain] = Field(default_factory=list, max_length=MAX_DOMAINS)
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS, pattern=NO_NUL)


class TrafficIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weights: dict[VersionText, float] = Field(
        max_length=MAX_TRAFFIC_VERSIONS,
        description="version -> fraction of requests; the active version gets the remainder",
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

    keywords: list[
        Annotated[str, Field(min_length=1, max_length=MAX_KEYWORD_CHARS, pattern=ONE_LINE)]
    ] = Field(default_factory=list, max_length=MAX_KEYWORDS)
    exemplars: list[
        Annotated[str, Field(min_length=1, max_length=MAX_EXEMPLAR_CHARS, pattern=NO_NUL)]
    ] = Field(default_factory=list, max_length=MAX_EXEMPLARS)


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

    adapters: (
        list[
            Annotated[str, Field(min_length=1, max_length=MAX_SERVED_NAME_CHARS, pattern=ONE_LINE)]
        ]
        | None
    ) = Field(default=None, min_length=1, max_length=MAX_WARMUP_ADAPTERS)


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


# ---- access: tokens, the audit log, whether access control is on

TokenName = Annotated[str, Field(min_length=1, max_length=64, pattern=ONE_LINE)]


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: TokenName = Field(examples=["ci-deployer"], description="shown in the statistics")
    scope: Scope = Field(examples=["inference"])


class TokenOut(BaseModel):
    """A token as listed: never its secret or hash."""

    model_config = ConfigDict(from_attributes=True)

    name: str
    scope: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class TokenCreatedOut(TokenOut):
    token: str = Field(description="the secret: shown this once, stored only as its SHA-256")


class TokenListOut(BaseModel):
    tokens: list[TokenOut]


class AuditEventOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: datetime
    actor: str
    action: str
    adapter: str | None
    version: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class AuditPageOut(BaseModel):
    events: list[AuditEventOut]
    limit: int
    next_before_id: int | None = Field(
        description="pass as before_id for the next (older) page; null on the last page"
    )


class AccessOut(BaseModel):
    access: Literal["on", "open"]
    require_api_keys: bool
    metrics_public: bool
    health_public: bool
