"""FastAPI dependencies: how routers reach the components (and nothing else does).

Each alias below is a parameter annotation for a route, e.g. ``adapters: AdaptersDep``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from registry.components import Components, ControlPlaneApp
from registry.db.session import Database
from registry.metrics.families import ControlPlaneMetrics
from registry.openai.proxy import FrontDoor
from registry.operations.health import HealthMonitor
from registry.operations.warmup import WarmUp
from registry.services.adapters import AdapterService
from registry.services.dispatching import DispatchService
from registry.services.routing_gaps import RoutingGapLog
from registry.settings import ControlPlaneSettings


def get_components(request: Request) -> Components:
    app = request.app
    if not isinstance(app, ControlPlaneApp):
        raise TypeError("these routes are served by registry.app.create_app's app only")
    return app.components


ComponentsDep = Annotated[Components, Depends(get_components)]


def get_database(components: ComponentsDep) -> Database:
    return components.database


def get_adapter_service(components: ComponentsDep) -> AdapterService:
    return components.adapters


def get_front_door(components: ComponentsDep) -> FrontDoor:
    return components.front_door


def get_routing_gaps(components: ComponentsDep) -> RoutingGapLog:
    return components.routing_gaps


def get_dispatch(components: ComponentsDep) -> DispatchService:
    return components.dispatch


def get_metrics(components: ComponentsDep) -> ControlPlaneMetrics:
    return components.metrics


def get_health(components: ComponentsDep) -> HealthMonitor:
    return components.health


def get_warmup(components: ComponentsDep) -> WarmUp:
    return components.warmup


def get_settings(components: ComponentsDep) -> ControlPlaneSettings:
    return components.settings


DatabaseDep = Annotated[Database, Depends(get_database)]
AdaptersDep = Annotated[AdapterService, Depends(get_adapter_service)]
FrontDoorDep = Annotated[FrontDoor, Depends(get_front_door)]
RoutingGapsDep = Annotated[RoutingGapLog, Depends(get_routing_gaps)]
DispatchDep = Annotated[DispatchService, Depends(get_dispatch)]
MetricsDep = Annotated[ControlPlaneMetrics, Depends(get_metrics)]
HealthDep = Annotated[HealthMonitor, Depends(get_health)]
WarmUpDep = Annotated[WarmUp, Depends(get_warmup)]
SettingsDep = Annotated[ControlPlaneSettings, Depends(get_settings)]
