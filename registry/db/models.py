"""SQLAlchemy 2.0 typed models of the adapter registry.

The schema itself is owned by Alembic (``migrations/``); a drift test keeps both equal.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Partial unique index: at most one row per adapter with is_active true (SQLite and PostgreSQL).
ONE_ACTIVE_INDEX = "uq_adapter_versions_one_active"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: dict[Any, Any] = {  # noqa: RUF012 (SQLAlchemy's declarative API)
        datetime: DateTime(timezone=True),
        dict[str, Any]: JSON,
        list[str]: JSON,
    }


class Adapter(Base):
    """A specialist (e.g. ``python-lora``); its servable artifacts are its versions."""

    __tablename__ = "adapters"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The dispatcher's hints for this specialist, beyond the shipped domain catalogue.
    dispatch_keywords: Mapped[list[str]] = mapped_column(default=list, server_default="[]")
    dispatch_exemplars: Mapped[list[str]] = mapped_column(default=list, server_default="[]")

    versions: Mapped[list[AdapterVersion]] = relationship(
        back_populates="adapter", order_by="AdapterVersion.id"
    )


class AdapterVersion(Base):
    """One immutable artifact of an adapter plus its serving state and running statistics."""

    __tablename__ = "adapter_versions"
    __table_args__ = (
        UniqueConstraint("adapter_id", "version"),
        Index(
            ONE_ACTIVE_INDEX,
            "adapter_id",
            unique=True,
            sqlite_where=text("is_active"),
            postgresql_where=text("is_active"),
        ),
        CheckConstraint("variant IN ('lora', 'dora', 'adalora')", name="variant"),
        CheckConstraint("status IN ('inactive', 'active')", name="status"),
        CheckConstraint("(status = 'active') = is_active", name="status_matches_is_active"),
        CheckConstraint("traffic_weight >= 0 AND traffic_weight <= 1", name="traffic_weight"),
        CheckConstraint("lora_int_id >= 1", name="lora_int_id_positive"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id", ondelete="CASCADE"))
    version: Mapped[str] = mapped_column(String(128))
    lora_int_id: Mapped[int] = mapped_column(Integer, unique=True)
    source_uri: Mapped[str] = mapped_column(Text)
    local_path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    rank: Mapped[int] = mapped_column(Integer)
    alpha: Mapped[float] = mapped_column(Float)
    target_modules: Mapped[list[str]] = mapped_column(JSON)
    variant: Mapped[str] = mapped_column(String(8))
    domains: Mapped[list[str]] = mapped_column(JSON)
    base_model: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    previous_version: Mapped[str | None] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16), default="inactive")
    is_active: Mapped[bool] = mapped_column(Boolean, default=False)
    traffic_weight: Mapped[float] = mapped_column(Float, default=0.0)
    avg_latency_ms: Mapped[float | None] = mapped_column(Float)
    success_rate: Mapped[float | None] = mapped_column(Float)
    request_count: Mapped[int] = mapped_column(Integer, default=0)
    success_count: Mapped[int] = mapped_column(Integer, default=0)
    last_used_at: Mapped[datetime | None] = mapped_column()

    adapter: Mapped[Adapter] = relationship(back_populates="versions")


class LoraIdCounter(Base):
    """A single row holding the next ``lora_int_id``; ids are never handed out twice."""

    __tablename__ = "lora_id_counter"
    __table_args__ = (
        CheckConstraint("id = 1", name="single_row"),
        CheckConstraint("next_id >= 1", name="next_id_positive"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    next_id: Mapped[int] = mapped_column(Integer)


class RoutingGap(Base):
    """A task no specialist matched, kept as material for training new specialists."""

    __tablename__ = "routing_gaps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    task_excerpt: Mapped[str] = mapped_column(Text)
    extracted_domains: Mapped[list[str]] = mapped_column(JSON)
    reason: Mapped[str] = mapped_column(Text)
    context_refs: Mapped[list[str]] = mapped_column(default=list, server_default="[]")
    # salient words of the task that no catalogue entry knows (the next specialist's vocabulary)
    terms: Mapped[list[str]] = mapped_column(default=list, server_default="[]")
    # each tier's best score: {"keyword": 0.4, "extension": 0.0, "embedding": 0.31}
    tier_scores: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default="{}")
    nearest_domain: Mapped[str | None] = mapped_column(String(128))
    nearest_score: Mapped[float | None] = mapped_column(Float)
    request_id: Mapped[str | None] = mapped_column(String(64))


class RequestRecord(Base):
    """Which model served a front-door request (``X-HiMoE-Request-Id``), for feedback.

    Written in batches off the request path; ``feedback`` is set once by ``POST /v1/feedback``.
    Rows older than the feedback window are purged.
    """

    __tablename__ = "request_records"

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    served_name: Mapped[str] = mapped_column(Text)
    adapter_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("adapter_versions.id", ondelete="CASCADE")
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    feedback: Mapped[bool | None] = mapped_column(Boolean)
    feedback_at: Mapped[datetime | None] = mapped_column()


class AccessToken(Base):
    """A named bearer token (admin, resolver, API key, metrics); only its SHA-256 is stored.

    Revoked tokens keep their row (``revoked_at`` set), so a name is never reused and the audit
    log's actors stay unambiguous.
    """

    __tablename__ = "access_tokens"
    __table_args__ = (
        CheckConstraint("scope IN ('admin', 'resolver', 'inference', 'metrics')", name="scope"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    scope: Mapped[str] = mapped_column(String(16))
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column()
    last_used_at: Mapped[datetime | None] = mapped_column()


class AuditEvent(Base):
    """One state change: who (a token's name, ``_anonymous`` or ``_system``), what, when, and
    the small relevant state before and after. Written in the change's own transaction."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(64), index=True)
    action: Mapped[str] = mapped_column(String(64))
    adapter: Mapped[str | None] = mapped_column(String(64), index=True)
    version: Mapped[str | None] = mapped_column(String(128))
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON)
