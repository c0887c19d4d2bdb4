"""The control plane's ASGI application.

``create_app`` builds the engine, the session factory and the services and stores them on
``app.state`` (``settings``, ``database``, ``adapters``) right away, so that routers added by
other components (the OpenAI front door's ``install``) can wire themselves to the services. No
connection is opened until the lifespan starts; the lifespan refuses to start unless the database
is at the Alembic head, and disposes of the engine on shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from registry.api import admin, health
from registry.api.problems import install_problem_handler
from registry.db.engine import make_engine
from registry.db.migrate import current_revision_of, head_revision
from registry.db.session import Database
from registry.errors import SchemaNotAtHeadError
from registry.services.adapters import AdapterService
from registry.services.artifacts import ArtifactStore
from registry.settings import ControlPlaneSettings

logger = logging.getLogger(__name__)

OPENAI_MODULE = "registry.openai"


def _install_openai(app: FastAPI, settings: ControlPlaneSettings) -> None:
    try:
        from registry.openai import install as install_openai  # type: ignore[attr-defined,unused-ignore]
    except ImportError as exc:
        if exc.name is not None and exc.name != OPENAI_MODULE:
            raise  # the front door exists but one of its own imports is broken
        logger.info("OpenAI front door not installed (%s)", exc)
        return
    install_openai(app, settings)


def create_app(settings: ControlPlaneSettings | None = None) -> FastAPI:
    settings = settings or ControlPlaneSettings()
    engine = make_engine(settings.database_url)
    database = Database(engine)
    service = AdapterService(
        database,
        ArtifactStore(settings.artifact_dir),
        base_model=settings.base_model,
        max_lora_rank=settings.max_lora_rank,
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            revision = await asyncio.to_thread(current_revision_of, engine)
            head = head_revision()
            if revision != head:
                logger.error("database at revision %s, head is %s", revision, head)
                raise SchemaNotAtHeadError()
            logger.info("control plane ready (schema %s)", head)
            yield
        finally:
            database.dispose()

    app = FastAPI(title="hi-moe-lora control plane", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.database = database
    app.state.adapters = service
    install_problem_handler(app)
    app.include_router(health.router)
    app.include_router(admin.router)
    _install_openai(app, settings)
    return app
