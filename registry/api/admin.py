"""Admin API ``/admin/v1``: thin routes over :class:`AdapterService`."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from registry.api.deps import Adapters
from registry.api.problems import PROBLEM_JSON
from registry.api.schemas import (
    AdapterListOut,
    AdapterOut,
    AdapterVersionOut,
    Problem,
    RegisterVersionIn,
    ResolvedAdapterOut,
    TrafficIn,
)

_problem = {"model": Problem, "content": {PROBLEM_JSON: {}}}
router = APIRouter(
    prefix="/admin/v1",
    tags=["admin"],
    responses={404: _problem, 409: _problem, 422: _problem},
)


@router.post(
    "/adapters/{name}/versions",
    status_code=status.HTTP_201_CREATED,
    response_model=AdapterVersionOut,
)
async def register_version(
    name: str, body: RegisterVersionIn, adapters: Adapters, response: Response
) -> AdapterVersionOut:
    info = await adapters.register(
        name, body.version, body.source, domains=body.domains, description=body.description
    )
    response.headers["Location"] = f"/admin/v1/adapters/{name}/versions/{info.version}"
    return AdapterVersionOut.model_validate(info)


@router.get("/adapters", response_model=AdapterListOut)
async def list_adapters(adapters: Adapters) -> AdapterListOut:
    infos = await adapters.list_adapters()
    return AdapterListOut(adapters=[AdapterOut.model_validate(info) for info in infos])


@router.get("/adapters/{name}", response_model=AdapterOut)
async def get_adapter(name: str, adapters: Adapters) -> AdapterOut:
    return AdapterOut.model_validate(await adapters.get_adapter(name))


@router.get("/adapters/{name}/versions/{version}", response_model=AdapterVersionOut)
async def get_version(name: str, version: str, adapters: Adapters) -> AdapterVersionOut:
    return AdapterVersionOut.model_validate(await adapters.get_version(name, version))


@router.post("/adapters/{name}/versions/{version}/promote", response_model=AdapterVersionOut)
async def promote(name: str, version: str, adapters: Adapters) -> AdapterVersionOut:
    return AdapterVersionOut.model_validate(await adapters.promote(name, version))


@router.post("/adapters/{name}/rollback", response_model=AdapterVersionOut)
async def rollback(name: str, adapters: Adapters) -> AdapterVersionOut:
    return AdapterVersionOut.model_validate(await adapters.rollback(name))


@router.delete("/adapters/{name}/versions/{version}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_version(name: str, version: str, adapters: Adapters) -> Response:
    await adapters.delete(name, version)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put("/adapters/{name}/traffic", response_model=AdapterOut)
async def set_traffic(name: str, body: TrafficIn, adapters: Adapters) -> AdapterOut:
    return AdapterOut.model_validate(await adapters.set_traffic(name, body.weights))


@router.get("/resolve/{served_name}", response_model=ResolvedAdapterOut)
async def resolve(served_name: str, adapters: Adapters) -> ResolvedAdapterOut:
    return ResolvedAdapterOut.model_validate(await adapters.resolve(served_name))
