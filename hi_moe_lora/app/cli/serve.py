"""``hi-moe-lora serve``: run the control plane (admin API, health, OpenAI front door)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from registry.settings import ControlPlaneSettings


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="run the control plane (settings from HI_MOE_LORA_* variables)",
        description=(
            "Serve the registry's admin API and the OpenAI front door with uvicorn. The database "
            "must be at the latest schema (`hi-moe-lora db upgrade`, or pass --migrate)."
        ),
    )
    parser.add_argument("--host", default=None, help="bind address (default: $HI_MOE_LORA_HOST)")
    parser.add_argument("--port", type=int, default=None, help="port (default: $HI_MOE_LORA_PORT)")
    parser.add_argument("--database-url", default=None, help="default: $HI_MOE_LORA_DATABASE_URL")
    parser.add_argument(
        "--migrate", action="store_true", help="upgrade the database to the latest schema first"
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="serve without access control on a non-loopback address (default: "
        "$HI_MOE_LORA_INSECURE; set HI_MOE_LORA_ADMIN_TOKEN instead)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes on the one port (default: $HI_MOE_LORA_WORKERS or 1; more than "
        "1 needs PostgreSQL)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from registry.app import access_refusal, create_app
    from registry.db.migrate import current_revision, head_revision, upgrade_to_head
    from registry.settings import ControlPlaneSettings

    overrides: dict[str, Any] = {
        key: value
        for key, value in (
            ("host", args.host),
            ("port", args.port),
            ("database_url", args.database_url),
            ("insecure", args.insecure),
            ("workers", args.workers),
        )
        if value is not None
    }
    settings = ControlPlaneSettings(**overrides, freeze_heap_at_start=True)
    if args.migrate:
        upgrade_to_head(settings.database_url)
    # The app's lifespan refuses a stale schema too; checking here first gives a one-line
    # answer instead of uvicorn's start-up traceback.
    revision, head = current_revision(settings.database_url), head_revision()
    if revision != head:
        print(
            f"error: the database {settings.database_url} is at schema {revision or 'none'}, "
            f"not {head}: run `hi-moe-lora db upgrade` (or `hi-moe-lora serve --migrate`)",
            file=sys.stderr,
        )
        return 2
    refused = access_refusal(settings)  # the lifespan checks again, with the same rule
    if refused is not None:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    if settings.workers > 1:
        return _run_workers(settings)
    # SIGTERM/SIGINT: uvicorn stops accepting, waits for requests and streams in flight at
    # most shutdown_grace_s, then runs the lifespan's shutdown (buffered statistics written).
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=settings.access_log,
        timeout_graceful_shutdown=settings.shutdown_grace_s,
    )
    return 0


def _run_workers(settings: ControlPlaneSettings) -> int:
    """``settings.workers`` processes, each an instance of the registry, on one port.

    uvicorn binds the port once and starts the workers (spawned: each builds its app from the
    environment, which carries these settings); it restarts a worker that dies and, on
    SIGTERM/SIGINT, stops them all gracefully. The workers merge their metrics for /metrics
    through a private directory made here and removed at the end.
    """
    import os
    import shutil
    import tempfile

    import uvicorn

    if settings.database_url.startswith("sqlite"):
        print(
            "error: --workers > 1 needs PostgreSQL (HI_MOE_LORA_DATABASE_URL=postgresql+psycopg://"
            "...): the workers share the registry and keep their caches in step through its "
            "change feed, which SQLite does not have",
            file=sys.stderr,
        )
        return 2
    if not settings.change_feed:
        print("error: --workers > 1 needs HI_MOE_LORA_CHANGE_FEED=true", file=sys.stderr)
        return 2
    metrics_dir = Path(tempfile.mkdtemp(prefix="hi-moe-lora-workers-"))
    try:
        chosen = settings.model_copy(update={"worker_metrics_dir": metrics_dir})
        os.environ.update(chosen.to_env())
        uvicorn.run(
            "registry.app:create_app",
            factory=True,
            workers=settings.workers,
            host=settings.host,
            port=settings.port,
            log_config=None,
            access_log=settings.access_log,
            timeout_graceful_shutdown=settings.shutdown_grace_s,
        )
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0
