"""FastAPI dependencies: how routers reach the components (and nothing else does).

Each alias below is a parameter annotation for a route, e.g. ``adapters: AdaptersDep``. The
callers (``AdminCaller``, ``ResolverCaller``, ``InferenceCaller``, ``MetricsCaller``,
``HealthCaller``) admit the request through the gatekeeper (401/403 otherwise) and hand the route
who called; ``InferenceCaller`` also counts the request for its client.

Every dependency is ``async def``: FastAPI runs a plain ``def`` dependency in a worker thread, a
thread hop per dependency per request that cost the front door about a fifth of its throughput.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from registry.access.gatekeeper import Gatekeeper
from registry.access.scopes import Caller
from registry.components import Components, ControlPlaneApp
from registry.db.session import Database
from registry.metrics.families import ControlPlaneMetrics
from registry.openai.proxy import FrontDoor
from registry.operations.health import HealthMonitor
from registry.operations.warmup import WarmUp
from registry.services.adapters import AdapterService
from registry.services.audit import AuditLog
from registry.services.dispatching import DispatchService
from registry.services.routing_gaps import RoutingGapLog
from registry.services.tokens import TokenService
from registry.settings import ControlPlaneSettings


async def get_components(request: Request) -> Components:
    app = request.app
    if not isinstance(app, ControlPlaneApp):
        raise TypeError("these routes are served by registry.app.create_app's app only")
    return app.components


ComponentsDep = Annotated[Components, Depends(get_components)]


async def get_database(components: ComponentsDep) -> Database:
    return components.database


async def get_adapter_service(components: ComponentsDep) -> AdapterService:
    return components.adapters


async def get_front_door(components: ComponentsDep) -> FrontDoor:
    return components.front_door


async def get_routing_gaps(components: ComponentsDep) -> RoutingGapLog:
    return components.routing_gaps


async def get_dispatch(components: ComponentsDep) -> DispatchService:
    return components.dispatch


async def get_metrics(components: ComponentsDep) -> ControlPlaneMetrics:
    return components.metrics


async def get_health(components: ComponentsDep) -> HealthMonitor:
    return components.health


async def get_warmup(components: ComponentsDep) -> WarmUp:
    return components.warmup


async def get_settings(components: ComponentsDep) -> ControlPlaneSettings:
    return components.settings


async def get_gatekeeper(components: ComponentsDep) -> Gatekeeper:
    return components.gatekeeper


async def get_tokens(components: ComponentsDep) -> TokenService:
    return components.tokens


async def get_audit(components: ComponentsDep) -> AuditLog:
    return components.audit


GatekeeperDep = Annotated[Gatekeeper, Depends(get_gatekeeper)]


def _authorization(request: Request) -> str | None:
    return request.headers.get("authorization")


async def admin_caller(request: Request, gatekeeper: GatekeeperDep) -> Caller:
    return await gatekeeper.admin(_authorization(request))


async def resolver_caller(request: Request, gatekeeper: GatekeeperDep) -> Caller:
    return await gatekeeper.resolver(_authorization(request))


async def inference_caller(
    request: Request, gatekeeper: GatekeeperDep, components: ComponentsDep
) -> Caller:
    caller = await gatekeeper.inference(_authorization(request))
    components.metrics.client_request(caller.name)
    return caller


async def metrics_caller(request: Request, gatekeeper: GatekeeperDep) -> Caller:
    return await gatekeeper.metrics(_authorization(request))


async def health_caller(request: Request, gatekeeper: GatekeeperDep) -> Caller:
    return await gatekeeper.health(_authorization(request))


DatabaseDep = Annotated[Database, Depends(get_database)]
AdaptersDep = Annotated[AdapterService, Depends(get_adapter_service)]
FrontDoorDep = Annotated[FrontDoor, Depends(get_front_door)]
RoutingGapsDep = Annotated[RoutingGapLog, Depends(get_routing_gaps)]
DispatchDep = Annotated[DispatchService, Depends(get_dispatch)]
MetricsDep = Annotated[ControlPlaneMetrics, Depends(get_metrics)]
HealthDep = Annotated[HealthMonitor, Depends(get_health)]
WarmUpDep = Annotated[WarmUp, Depends(get_warmup)]
SettingsDep = Annotated[ControlPlaneSettings, Depends(get_settings)]
TokensDep = Annotated[TokenService, Depends(get_tokens)]
AuditDep = Annotated[AuditLog, Depends(get_audit)]
AdminCaller = Annotated[Caller, Depends(admin_caller)]
ResolverCaller = Annotated[Caller, Depends(resolver_caller)]
InferenceCaller = Annotated[Caller, Depends(inference_caller)]
MetricsCaller = Annotated[Caller, Depends(metrics_caller)]
HealthCaller = Annotated[Caller, Depends(health_caller)]
