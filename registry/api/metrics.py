"""``GET /metrics``: the control plane's Prometheus exposition (text format)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from hi_moe_lora.control_api import paths
from registry.dependencies import MetricsDep

router = APIRouter(tags=["metrics"])


@router.get(paths.METRICS, response_class=Response)
async def metrics(families: MetricsDep) -> Response:
    body, content_type = families.exposition()
    return Response(body, media_type=content_type)
