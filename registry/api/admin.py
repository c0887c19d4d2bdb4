"""Admin API ``/admin/v1``: thin routes over :class:`AdapterService`.

Every route needs an admin token while access control is on, except the resolver's look-up
(a resolver or admin token); changes are made, and audited, as the calling token's name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from fastapi import APIRouter, Request, Response, status

from hi_moe_lora.control_api import ResolvedAdapter, paths
from registry.api.problems import PROBLEM_JSON
from registry.api.registration import registration_events
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
from registry.dependencies import AdminCaller, ResolverCaller
from registry.services.records import AdapterInfo, AdapterVersionInfo
from registry.services.sources import Progress

_problem = {"model": Problem, "content": {PROBLEM_JSON: {}}}
_progress_lines = {
    "description": "with Accept: application/x-ndjson: progress lines, then the outcome",
    "content": {paths.NDJSON: {"schema": {"type": "string"}}},
}
router = APIRouter(
    prefix=paths.ADMIN_PREFIX,
    tags=["admin"],
    responses={401: _problem, 403: _problem, 404: _problem, 409: _problem, 422: _problem},
)


@router.post(
    paths.VERSIONS,
    status_code=status.HTTP_201_CREATED,
    response_model=AdapterVersionOut,
    responses={200: _progress_lines},
)
async def register_version(
    name: str,
    body: RegisterVersionIn,
    caller: AdminCaller,
    adapters: Adapters,
    request: Request,
    response: Response,
) -> AdapterVersionOut | Response:
    """Register a version from a local directory or an allowed URL; with ``Accept:
    application/x-ndjson`` the answer streams progress lines, then the outcome
    (:mod:`registry.api.registration`)."""

    def register(progress: Progress | None = None) -> Awaitable[AdapterVersionInfo]:
        return adapters.register(
            name,
            body.version,
            body.source,
            domains=body.domains,
            description=body.description,
            actor=caller.name,
            progress=progress,
        )

    if paths.NDJSON in request.headers.get("accept", ""):
        return await registration_events(register)
    info = await register()
    response.headers["Location"] = paths.admin_path(paths.VERSION, name=name, version=info.version)
    return AdapterVersionOut.model_validate(info)


def _listing_json(infos: list[AdapterInfo]) -> bytes:
    listing = AdapterListOut(adapters=[AdapterOut.model_validate(i) for i in infos])
    return listing.model_dump_json(by_alias=True).encode()


@router.get(paths.ADAPTERS, response_model=AdapterListOut)
async def list_adapters(_: AdminCaller, adapters: Adapters) -> Response:
    infos = await adapters.list_adapters()
    # the listing grows with every version: validate and serialise it in a worker thread, not
    # on the event loop that serves inference (64 operators listing starved the front door)
    body = await asyncio.to_thread(_listing_json, infos)
    return Response(body, media_type="application/json")


@router.get(paths.ADAPTER, response_model=AdapterOut)
async def get_adapter(name: str, _: AdminCaller, adapters: Adapters) -> AdapterOut:
    return AdapterOut.model_validate(await adapters.get_adapter(name))


@router.get(paths.VERSION, response_model=AdapterVersionOut)
async def get_version(
    name: str, version: str, _: AdminCaller, adapters: Adapters
) -> AdapterVersionOut:
    return AdapterVersionOut.model_validate(await adapters.get_version(name, version))


@router.post(paths.PROMOTE, response_model=AdapterVersionOut)
async def promote(
    name: str, version: str, caller: AdminCaller, adapters: Adapters
) -> AdapterVersionOut:
    info = await adapters.promote(name, version, actor=caller.name)
    return AdapterVersionOut.model_validate(info)


@router.post(paths.ROLLBACK, response_model=AdapterVersionOut)
async def rollback(name: str, caller: AdminCaller, adapters: Adapters) -> AdapterVersionOut:
    return AdapterVersionOut.model_validate(await adapters.rollback(name, actor=caller.name))


@router.delete(paths.VERSION, status_code=status.HTTP_204_NO_CONTENT)
async def delete_version(
    name: str, version: str, caller: AdminCaller, adapters: Adapters
) -> Response:
    await adapters.delete(name, version, actor=caller.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put(paths.TRAFFIC, response_model=AdapterOut)
async def set_traffic(
    name: str, body: TrafficIn, caller: AdminCaller, adapters: Adapters
) -> AdapterOut:
    info = await adapters.set_traffic(name, body.weights, actor=caller.name)
    return AdapterOut.model_validate(info)


@router.get(paths.RESOLVE, response_model=ResolvedAdapter)
async def resolve(served_name: str, _: ResolverCaller, adapters: Adapters) -> ResolvedAdapter:
    return await adapters.resolve(served_name)


@router.put(paths.DISPATCH_HINTS, response_model=AdapterOut)
async def set_dispatch_hints(
    name: str, body: DispatchHintsIn, caller: AdminCaller, adapters: Adapters
) -> AdapterOut:
    info = await adapters.set_dispatch_hints(
        name, keywords=body.keywords, exemplars=body.exemplars, actor=caller.name
    )
    return AdapterOut.model_validate(info)
