"""Readiness: the database reachable and at the latest Alembic revision, and, while the health
monitor runs, at least one vLLM upstream that passed its last check."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.exc import SQLAlchemyError

from registry.db.migrate import current_revision_of, head_revision
from registry.db.session import Database
from registry.errors import DatabaseUnavailable, SchemaNotAtHeadError, ServiceUnavailableError
from registry.operations.health import HealthMonitor

logger = logging.getLogger(__name__)


async def require_schema_at_head(database: Database) -> str:
    """The head revision; raises :class:`SchemaNotAtHeadError` or, when the database cannot
    be reached, :class:`DatabaseUnavailable` (code ``database_unavailable``)."""
    try:
        revision = await asyncio.to_thread(current_revision_of, database.engine)
    except SQLAlchemyError as exc:
        logger.warning("not ready: database unavailable: %s", exc)
        raise DatabaseUnavailable(
            f"the registry's database is unavailable ({type(exc).__name__})"
        ) from exc
    head = head_revision()
    if revision != head:
        logger.error("database at revision %s, head is %s", revision, head)
        raise SchemaNotAtHeadError()
    return head


async def require_ready(database: Database, health: HealthMonitor | None) -> str:
    """The schema head, if the control plane can serve; else raises
    :class:`ServiceUnavailableError` (``database_unavailable``, ``no_healthy_upstream``) or
    :class:`SchemaNotAtHeadError`. ``health`` is ``None`` when health checks are off."""
    head = await require_schema_at_head(database)
    if health is not None and not health.any_upstream_up():
        picture = health.snapshot()
        reasons = "; ".join(f"{u.url}: {u.reason or 'not checked yet'}" for u in picture.upstreams)
        raise ServiceUnavailableError(
            f"no healthy vLLM upstream ({reasons})", code="no_healthy_upstream"
        )
    return head
