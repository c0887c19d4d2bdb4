"""Queries and statements over ``adapters`` and ``adapter_versions``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import case, delete, or_, select, update
from sqlalchemy.orm import Session, selectinload

from registry.db.models import Adapter, AdapterVersion
from registry.statistics import fold_ema


class AdapterRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, name: str, *, lock: bool = False) -> Adapter | None:
        statement = select(Adapter).where(Adapter.name == name)
        if lock:
            statement = statement.with_for_update()
        return self.session.execute(statement).scalar_one_or_none()

    def get_with_versions(self, name: str) -> Adapter | None:
        statement = (
            select(Adapter).where(Adapter.name == name).options(selectinload(Adapter.versions))
        )
        return self.session.execute(statement).scalar_one_or_none()

    def list_with_versions(self) -> Sequence[Adapter]:
        statement = select(Adapter).order_by(Adapter.name).options(selectinload(Adapter.versions))
        return self.session.execute(statement).scalars().all()

    def add(self, adapter: Adapter) -> Adapter:
        self.session.add(adapter)
        self.session.flush()
        return adapter

    def versions(self, adapter_id: int) -> Sequence[AdapterVersion]:
        statement = (
            select(AdapterVersion)
            .where(AdapterVersion.adapter_id == adapter_id)
            .order_by(AdapterVersion.id)
        )
        return self.session.execute(statement).scalars().all()

    def version(self, adapter_id: int, version: str) -> AdapterVersion | None:
        statement = select(AdapterVersion).where(
            AdapterVersion.adapter_id == adapter_id, AdapterVersion.version == version
        )
        return self.session.execute(statement).scalar_one_or_none()

    def active_version(self, adapter_id: int) -> AdapterVersion | None:
        statement = select(AdapterVersion).where(
            AdapterVersion.adapter_id == adapter_id, AdapterVersion.is_active.is_(True)
        )
        return self.session.execute(statement).scalar_one_or_none()

    def served_version(self, name: str, version: str | None) -> AdapterVersion | None:
        """``name@version``, or the active version of ``name`` when ``version`` is None."""
        statement = (
            select(AdapterVersion)
            .join(Adapter, Adapter.id == AdapterVersion.adapter_id)
            .where(Adapter.name == name)
        )
        if version is None:
            statement = statement.where(AdapterVersion.is_active.is_(True))
        else:
            statement = statement.where(AdapterVersion.version == version)
        return self.session.execute(statement).scalar_one_or_none()

    def add_version(self, version: AdapterVersion) -> AdapterVersion:
        self.session.add(version)
        self.session.flush()
        return version

    def delete_version(self, version: AdapterVersion) -> None:
        self.session.execute(delete(AdapterVersion).where(AdapterVersion.id == version.id))
        self.session.expunge(version)

    def set_active(self, version: AdapterVersion, active: bool) -> None:
        """Flip one version; callers deactivate the old one first (the index allows one)."""
        version.is_active = active
        version.status = "active" if active else "inactive"
        self.session.flush()

    def record_outcomes(
        self, version_id: int, *, latencies_ms: Sequence[float], oks: Sequence[bool], at: datetime
    ) -> None:
        """Fold a batch of outcomes (in request order) in one atomic UPDATE (no lost updates)."""
        latency = fold_ema(latencies_ms)
        success = fold_ema([1.0 if ok else 0.0 for ok in oks])
        table = AdapterVersion
        statement = (
            update(table)
            .where(table.id == version_id)
            .values(
                request_count=table.request_count + len(oks),
                success_count=table.success_count + sum(oks),
                avg_latency_ms=case(
                    (table.avg_latency_ms.is_(None), latency.first),
                    else_=table.avg_latency_ms * latency.decay + latency.tail,
                ),
                success_rate=case(
                    (table.success_rate.is_(None), success.first),
                    else_=table.success_rate * success.decay + success.tail,
                ),
                # batches of several instances commit in any order: keep the latest use
                last_used_at=case(
                    (or_(table.last_used_at.is_(None), table.last_used_at < at), at),
                    else_=table.last_used_at,
                ),
            )
            .execution_options(synchronize_session=False)
        )
        self.session.execute(statement)

    def record_feedback(self, version_id: int, *, success: bool) -> None:
        """Fold one explicit success/failure into the version's success rate (atomic UPDATE)."""
        fold = fold_ema([1.0 if success else 0.0])
        table = AdapterVersion
        statement = (
            update(table)
            .where(table.id == version_id)
            .values(
                success_rate=case(
                    (table.success_rate.is_(None), fold.first),
                    else_=table.success_rate * fold.decay + fold.tail,
                )
            )
            .execution_options(synchronize_session=False)
        )
        self.session.execute(statement)
