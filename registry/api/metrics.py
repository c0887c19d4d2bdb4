"""``GET /metrics``: the control plane's Prometheus exposition (text format).

Public unless ``metrics_public`` is false with access control on: then a ``metrics`` (or admin)
token is needed. Under ``serve --workers N`` every worker's families, merged
(``registry/metrics/workers.py``).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from starlette.responses import Response

from hi_moe_lora.control_api import paths
from registry.api.problems import PROBLEM_JSON
from registry.api.schemas import Problem
from registry.dependencies import ComponentsDep, metrics_caller

router = APIRouter(tags=["metrics"])


@router.get(
    paths.METRICS,
    response_class=Response,
    dependencies=[Depends(metrics_caller)],
    responses={code: {"model": Problem, "content": {PROBLEM_JSON: {}}} for code in (401, 403)},
)
async def metrics(components: ComponentsDep) -> Response:
    if components.worker_metrics is not None:  # serve --workers N: every worker's, merged
        return Response(await components.worker_metrics.exposition(), media_type=CONTENT_TYPE)
    body, content_type = components.metrics.exposition()
    return Response(body, media_type=content_type)
