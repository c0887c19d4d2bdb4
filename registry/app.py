"""The composition root: ``create_app(settings)`` builds the control plane.

Read top to bottom, it is the list of components in dependency order: settings → metrics →
database → adapter service → upstream pool and what each upstream has loaded → the front door's
parts (version table, request log and its outcome recorder, routing gaps and the dispatcher) →
operations (health monitor, warm-up) → the app and its routers. The
components' life cycle (start in this order, stop in reverse) is
:meth:`registry.components.Components.running`, the app's lifespan. Tests build the app the
same way.
"""

from __future__ import annotations

from pydantic import SecretStr
from sqlalchemy.pool import NullPool

from registry.access.gatekeeper import Gatekeeper, Openings
from registry.access.keyring import Key, Keyring
from registry.access.secrets import digest
from registry.access.startup import admin_token_stored, refusal
from registry.api import access, admin, artifacts, dispatcher, health, metrics, operations
from registry.api.access_errors import install_access_handler
from registry.api.admission import AdminAdmission
from registry.api.limits import BodyLimit
from registry.api.problems import install_problem_handler
from registry.components import Components, ControlPlaneApp
from registry.db.engine import make_engine
from registry.db.session import Database
from registry.dispatch import ScoringWeights
from registry.fleet.change_feed import ChangeFeed, wants_change_feed
from registry.fleet.invalidation import BareNameInvalidator
from registry.fleet.loaded import LoadedAdapters
from registry.fleet.quarantine import Quarantine
from registry.fleet.routing import ReplicaChooser
from registry.fleet.upstreams import UpstreamPool
from registry.metrics.families import ControlPlaneMetrics
from registry.metrics.workers import WorkerMetrics
from registry.openai import endpoints as openai_endpoints
from registry.openai.outcomes import OutcomeRecorder
from registry.openai.proxy import FrontDoor
from registry.openai.targets import ModelRouter
from registry.openai.versions import ActiveVersionChanged, VersionDeleted, VersionTable
from registry.operations.health import HealthMonitor, HealthSettings
from registry.operations.warmup import WarmUp, WarmUpSettings
from registry.services.adapters import AdapterService
from registry.services.artifacts import ArtifactStore
from registry.services.audit import AuditLog
from registry.services.dispatching import DispatchService, DispatchSettings
from registry.services.remote_sources import RemoteSourcePolicy
from registry.services.requests import RequestLog
from registry.services.routing_gaps import RoutingGapLog
from registry.services.sources import SourceLimits, SourcePolicy
from registry.services.tokens import TokenService
from registry.settings import ControlPlaneSettings


def create_app(settings: ControlPlaneSettings | None = None) -> ControlPlaneApp:
    settings = hashed_secrets(settings or ControlPlaneSettings())
    control_plane_metrics = ControlPlaneMetrics()
    database = Database(
        make_engine(settings.database_url, connect_timeout_s=settings.database_connect_timeout_s)
    )
    keyring = Keyring(database, bootstrap_keys(settings), refresh_s=settings.access_refresh_s)
    gatekeeper = Gatekeeper(keyring, openings(settings))
    tokens = TokenService(database, bootstrap_admin=keyring.bootstrap_admin)
    tokens.add_changed_listener(keyring.refresh)
    audit = AuditLog(database)
    source_limits = SourceLimits(
        max_file_bytes=settings.source_max_file_bytes,
        max_artifact_bytes=settings.source_max_artifact_bytes,
        max_files=settings.source_max_files,
    )
    adapters = AdapterService(
        database,
        ArtifactStore(settings.artifact_dir),
        base_model=settings.base_model,
        max_lora_rank=settings.max_lora_rank,
        sources=SourcePolicy(
            settings.source_roots,
            source_limits,
            remote=RemoteSourcePolicy(
                settings.source_url_prefixes,
                source_limits,
                read_timeout_s=settings.source_read_timeout_s,
                deadline_s=settings.source_fetch_timeout_s,
                ca_bundle=settings.source_ca_bundle,
            ),
        ),
    )
    upstreams = UpstreamPool(
        settings.vllm_urls,
        read_timeout_s=settings.upstream_read_timeout_s,
        connect_timeout_s=settings.upstream_connect_timeout_s,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        on_retry=lambda replica: control_plane_metrics.upstream_retried(replica.url),
    )
    control_plane_metrics.watch_outstanding(
        [(r.url, r.outstanding_now) for r in upstreams.replicas]
    )
    loaded = LoadedAdapters()
    chooser = ReplicaChooser(
        upstreams.replicas,
        loaded,
        policy=settings.routing_policy,
        spill_at=settings.routing_spill_at,
    )
    quarantine = Quarantine()
    versions = VersionTable(adapters, ttl_s=settings.routing_snapshot_ttl_s)
    invalidator = BareNameInvalidator(
        upstreams, control_plane_metrics, deadline_s=settings.upstream_unload_timeout_s
    )
    adapters.add_active_changed_listener(ActiveVersionChanged(versions, invalidator))
    adapters.add_version_deleted_listener(VersionDeleted(versions, invalidator))
    requests = RequestLog(database)
    outcomes = OutcomeRecorder(requests)
    routing_gaps = RoutingGapLog(database)
    dispatch = DispatchService(
        adapters,
        routing_gaps,
        DispatchSettings(
            embeddings=settings.dispatch_embeddings,
            refresh_s=settings.dispatch_refresh_s,
            weights=ScoringWeights(
                success_rate=settings.dispatch_weight_success,
                usage=settings.dispatch_weight_usage,
                match=settings.dispatch_weight_match,
            ),
        ),
    )
    front_door = FrontDoor(
        adapters,
        ModelRouter(versions, upstreams, settings.base_model),
        upstreams,
        outcomes,
        dispatch,
        requests,
        control_plane_metrics,
        loaded,
        quarantine,
        chooser,
    )
    control_plane_metrics.watch_backlog("outcomes", outcomes)
    control_plane_metrics.watch_backlog("routing_gaps", dispatch.gap_backlog)
    health_monitor = HealthMonitor(
        adapters,
        upstreams,
        loaded,
        control_plane_metrics,
        quarantine,
        HealthSettings(
            interval_s=settings.health_interval_s,
            probe_timeout_s=settings.health_probe_timeout_s,
            probe_concurrency=settings.health_probe_concurrency,
            probe_tokens=settings.health_probe_tokens,
            start_grace_s=settings.health_start_grace_s,
            unload_timeout_s=settings.upstream_unload_timeout_s,
        ),
        base_model=settings.base_model,
        probes_here=chooser.serves_here,
    )
    warmup = WarmUp(
        adapters,
        upstreams,
        loaded,
        control_plane_metrics,
        quarantine,
        WarmUpSettings(
            max_loras=settings.max_loras,
            max_cpu_loras=settings.max_cpu_loras,
            concurrency=settings.warmup_concurrency,
            timeout_s=settings.warmup_timeout_s,
        ),
    )
    adapters.add_served_changed_listener(health_monitor.served_changed)
    change_feed = None
    if wants_change_feed(settings.database_url, settings.change_feed):
        # other instances' changes drop this one's caches (no fleet-side effect: no unload,
        # no warm-up; the instance that made the change did those)
        change_feed = ChangeFeed(
            database,
            settings.database_url,
            control_plane_metrics,
            connect_timeout_s=settings.database_connect_timeout_s,
        )
        change_feed.add_adapter_listener(versions.forget)
        change_feed.add_adapter_listener(adapters.changed_elsewhere)
        change_feed.add_adapter_listener(health_monitor.served_changed)
        change_feed.add_token_listener(keyring.refresh)
    if settings.warmup:
        health_monitor.add_up_listener(warmup.upstream_up)
        adapters.add_served_changed_listener(warmup.served_changed)
    worker_metrics = None
    if settings.worker_metrics_dir is not None:
        worker_metrics = WorkerMetrics(
            settings.worker_metrics_dir, lambda: control_plane_metrics.exposition()[0]
        )
    components = Components(
        settings=settings,
        database=database,
        gatekeeper=gatekeeper,
        tokens=tokens,
        audit=audit,
        adapters=adapters,
        upstreams=upstreams,
        invalidator=invalidator,
        requests=requests,
        outcomes=outcomes,
        routing_gaps=routing_gaps,
        dispatch=dispatch,
        front_door=front_door,
        metrics=control_plane_metrics,
        health=health_monitor,
        warmup=warmup,
        change_feed=change_feed,
        worker_metrics=worker_metrics,
    )

    app = ControlPlaneApp(components)
    install_problem_handler(app)
    install_access_handler(app)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(AdminAdmission)
    # the front door first: routes are matched in order, and /v1 carries the traffic
    app.include_router(openai_endpoints.router)
    app.include_router(health.router)
    app.include_router(admin.router)
    app.include_router(artifacts.router)
    app.include_router(access.router)
    app.include_router(dispatcher.router)
    app.include_router(operations.router)
    app.include_router(metrics.router)
    return app


def hashed_secrets(settings: ControlPlaneSettings) -> ControlPlaneSettings:
    """``settings`` with each bootstrap secret replaced by its SHA-256 (no plaintext kept)."""
    update: dict[str, object] = {}
    for plain, hashed in (
        ("admin_token", "admin_token_sha256"),
        ("resolver_token", "resolver_token_sha256"),
    ):
        secret = getattr(settings, plain)
        if isinstance(secret, SecretStr):
            update[plain] = None
            update[hashed] = digest(secret.get_secret_value())
    return settings.model_copy(update=update) if update else settings


def bootstrap_keys(settings: ControlPlaneSettings) -> list[Key]:
    """The settings' admin and resolver secrets as keys named ``admin`` and ``resolver``."""
    hashed = hashed_secrets(settings)
    keys: list[Key] = []
    if hashed.admin_token_sha256 is not None:
        keys.append(Key("admin", "admin", hashed.admin_token_sha256))
    if hashed.resolver_token_sha256 is not None:
        keys.append(Key("resolver", "resolver", hashed.resolver_token_sha256))
    return keys


def openings(settings: ControlPlaneSettings) -> Openings:
    return Openings(
        require_api_keys=settings.require_api_keys,
        metrics_public=settings.metrics_public,
        health_public=settings.health_public,
    )


def access_refusal(settings: ControlPlaneSettings) -> str | None:
    """Why these settings (and the admin tokens in their database) must not be served, or
    ``None``: the check the app's start-up makes, for a one-line answer before it starts."""
    closed = any(key.scope == "admin" for key in bootstrap_keys(settings))
    if not closed:
        database = Database(make_engine(settings.database_url, poolclass=NullPool))
        try:
            closed = admin_token_stored(database)
        finally:
            database.dispose()
    return refusal(
        closed=closed, host=settings.host, insecure=settings.insecure, openings=openings(settings)
    )
