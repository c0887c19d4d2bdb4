"""Is the registry's database usable: reachable and at the latest Alembic revision."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.exc import SQLAlchemyError

from registry.db.migrate import current_revision_of, head_revision
from registry.db.session import Database
from registry.errors import SchemaNotAtHeadError, ServiceUnavailableError

logger = logging.getLogger(__name__)


async def require_schema_at_head(database: Database) -> str:
    """The head revision; raises :class:`SchemaNotAtHeadError` or, when the database cannot
    be reached, :class:`ServiceUnavailableError` (code ``database_unreachable``)."""
    try:
        revision = await asyncio.to_thread(current_revision_of, database.engine)
    except SQLAlchemyError as exc:
        logger.warning("database unreachable: %s", exc)
        raise ServiceUnavailableError(
            f"database unreachable: {type(exc).__name__}", code="database_unreachable"
        ) from exc
    head = head_revision()
    if revision != head:
        logger.error("database at revision %s, head is %s", revision, head)
        raise SchemaNotAtHeadError()
    return head
