"""Admin API ``/admin/v1``: thin routes over :class:`AdapterService`."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from hi_moe_lora.control_api import ResolvedAdapter, paths
from registry.api.problems import PROBLEM_JSON
from registry.api.schemas import (
    AdapterListOut,
    AdapterOut,
    AdapterVersionOut,
    DispatchHintsIn,
    Problem,
    RegisterVersionIn,
    TrafficIn,
)
from registry.dependencies import AdaptersDep as Adapters

_problem = {"model": Problem, "content": {PROBLEM_JSON: {}}}
router = APIRouter(
    prefix=paths.ADMIN_PREFIX,
    tags=["admin"],
    responses={404: _problem, 409: _problem, 422: _problem},
)


@router.post(
    paths.VERSIONS,
    status_code=status.HTTP_201_CREATED,
    response_model=AdapterVersionOut,
)
async def register_version(
    name: str, body: RegisterVersionIn, adapters: Adapters, response: Response
) -> AdapterVersionOut:
    info = await adapters.register(
        name, body.version, body.source, domains=body.domains, description=body.description
    )
    response.headers["Location"] = paths.admin_path(paths.VERSION, name=name, version=info.version)
    return AdapterVersionOut.model_validate(info)


@router.get(paths.ADAPTERS, response_model=AdapterListOut)
async def list_adapters(adapters: Adapters) -> AdapterListOut:
    infos = await adapters.list_adapters()
    return AdapterListOut(adapters=[AdapterOut.model_validate(info) for info in infos])


@router.get(paths.ADAPTER, response_model=AdapterOut)
async def get_adapter(name: str, adapters: Adapters) -> AdapterOut:
    return AdapterOut.model_validate(await adapters.get_adapter(name))


@router.get(paths.VERSION, response_model=AdapterVersionOut)
async def get_version(name: str, version: str, adapters: Adapters) -> AdapterVersionOut:
    return AdapterVersionOut.model_validate(await adapters.get_version(name, version))


@router.post(paths.PROMOTE, response_model=AdapterVersionOut)
async def promote(name: str, version: str, adapters: Adapters) -> AdapterVersionOut:
    return AdapterVersionOut.model_validate(await adapters.promote(name, version))


@router.post(paths.ROLLBACK, response_model=AdapterVersionOut)
async def rollback(name: str, adapters: Adapters) -> AdapterVersionOut:
    return AdapterVersionOut.model_validate(await adapters.rollback(name))


@router.delete(paths.VERSION, status_code=status.HTTP_204_NO_CONTENT)
async def delete_version(name: str, version: str, adapters: Adapters) -> Response:
    await adapters.delete(name, version)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put(paths.TRAFFIC, response_model=AdapterOut)
async def set_traffic(name: str, body: TrafficIn, adapters: Adapters) -> AdapterOut:
    return AdapterOut.model_validate(await adapters.set_traffic(name, body.weights))


@router.get(paths.RESOLVE, response_model=ResolvedAdapter)
async def resolve(served_name: str, adapters: Adapters) -> ResolvedAdapter:
    return await adapters.resolve(served_name)


@router.put(paths.DISPATCH_HINTS, response_model=AdapterOut)
async def set_dispatch_hints(name: str, body: DispatchHintsIn, adapters: Adapters) -> AdapterOut:
    info = await adapters.set_dispatch_hints(name, keywords=body.keywords, exemplars=body.exemplars)
    return AdapterOut.model_validate(info)
