"""Admin API of operations: warm-up on demand (``POST``) and the last warm-up (``GET``).

``POST /admin/v1/warmup`` answers the whole report as JSON, or, when the client accepts
``application/x-ndjson``, one JSON line per event as it happens (``plan``, one ``result`` per
version and upstream, ``done``) so a CLI can draw a progress bar. Unknown adapters are refused
(404 problem) before anything is sent to vLLM. Admin only while access control is on; a run on
demand is recorded in the audit log (``warmup.run``, its caller, the versions and the outcome).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response, StreamingResponse

from hi_moe_lora.control_api import paths
from registry.api.problems import PROBLEM_JSON
from registry.api.schemas import Problem, WarmResultOut, WarmTargetOut, WarmUpIn, WarmUpOut
from registry.dependencies import AdminCaller, AuditDep, WarmUpDep, admin_caller
from registry.errors import NotFoundError
from registry.operations.warmup import WarmResult, WarmTarget, WarmUp, WarmUpReport
from registry.services.audit import AuditLog

_problem = {"model": Problem, "content": {PROBLEM_JSON: {}}}
router = APIRouter(
    prefix=paths.ADMIN_PREFIX,
    tags=["operations"],
    dependencies=[Depends(admin_caller)],
    responses={401: _problem, 403: _problem, 404: _problem, 422: _problem},
)


def result_out(result: WarmResult) -> WarmResultOut:
    return WarmResultOut(
        adapter=result.target.adapter,
        version=result.target.version,
        served_name=result.target.served_name,
        upstream=result.upstream,
        outcome=result.outcome,
        time_ms=result.time_ms,
        load_ms=result.load_ms,
        detail=result.detail,
    )


def report_out(report: WarmUpReport) -> WarmUpOut:
    return WarmUpOut(
        reason=report.reason,
        started_at=report.started_at,
        time_ms=report.time_ms,
        targets=[WarmTargetOut.model_validate(t) for t in report.targets],
        upstreams=list(report.upstreams),
        loaded=report.loaded,
        failed=report.failed,
        results=[result_out(r) for r in report.results],
    )


@router.post(paths.WARMUP, response_model=WarmUpOut)
async def warm_up(
    request: Request,
    caller: AdminCaller,
    warmup: WarmUpDep,
    audit: AuditDep,
    body: WarmUpIn | None = None,
) -> Response:
    """Warm the named adapters (default: the most recently used served versions, as many as
    vLLM holds in host memory) on every upstream; per version and upstream: outcome, time,
    load time."""
    targets = await warmup.plan(body.adapters if body is not None else None)
    if paths.NDJSON in request.headers.get("accept", ""):
        events = _events(warmup, targets, lambda r: _audited(audit, caller.name, r))
        return StreamingResponse(events, media_type=paths.NDJSON)
    report = await warmup.run(targets)
    await _audited(audit, caller.name, report)
    return Response(report_out(report).model_dump_json(), media_type="application/json")


async def _audited(audit: AuditLog, actor: str, report: WarmUpReport) -> None:
    await audit.record(
        actor,
        "warmup.run",
        after={
            "targets": [target.served_name for target in report.targets],
            "loaded": report.loaded,
            "failed": report.failed,
        },
    )


@router.get(paths.WARMUP, response_model=WarmUpOut)
async def last_warm_up(warmup: WarmUpDep) -> WarmUpOut:
    """The last warm-up's report (background or on demand); 404 before the first."""
    if warmup.last_report is None:
        raise NotFoundError("no warm-up has run yet", code="no_warmup_yet")
    return report_out(warmup.last_report)


async def _events(
    warmup: WarmUp,
    targets: list[WarmTarget],
    finished: Callable[[WarmUpReport], Awaitable[None]],
) -> AsyncIterator[bytes]:
    queue: asyncio.Queue[WarmResult] = asyncio.Queue()
    running = warmup.start_run(targets, queue.put_nowait)  # never raises; one result per pair
    upstreams = [replica.url for replica in warmup.replicas]
    total = len(targets) * len(upstreams)
    yield _line(
        {
            "event": "plan",
            "targets": [WarmTargetOut.model_validate(t).model_dump() for t in targets],
            "upstreams": upstreams,
            "total": total,
        }
    )
    for _ in range(total):
        result = await queue.get()
        yield _line({"event": "result", **result_out(result).model_dump()})
    report = await running
    await finished(report)
    yield _line(
        {
            "event": "done",
            "loaded": report.loaded,
            "failed": report.failed,
            "time_ms": report.time_ms,
        }
    )


def _line(event: dict[str, Any]) -> bytes:
    return (json.dumps(event, separators=(",", ":")) + "\n").encode()
