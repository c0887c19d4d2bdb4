"""Dependencies shared by the routers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from registry.services.adapters import AdapterService


def get_adapter_service(request: Request) -> AdapterService:
    service: AdapterService = request.app.state.adapters
    return service


Adapters = Annotated[AdapterService, Depends(get_adapter_service)]
