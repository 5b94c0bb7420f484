"""GET /metrics: a JSON summary of the counters (as MiniInfer offers), behind the API key; the
same figures in Prometheus' text format or OpenMetrics with `Accept: text/plain` (or
openmetrics) or `?format=prometheus|openmetrics` (deployments/ingress/prometheus.py).

Ray's metrics export carries the slots' figures per replica with Ray Serve's own (docs/metrics.md);
this route is for people, scripts and scrapers that do not go through Ray. Counts are per ingress
replica; `ServingMetrics` (ingress/serving/metrics.py) adds each slot's numbers.
"""

from typing import Optional

from fastapi import APIRouter, Depends, Header, Query, Response

from deployments.ingress.prometheus import JSON, wanted_format
from deployments.ingress.serving.metrics import ServingMetrics
from deployments.ingress.state import IngressState, ingress_state

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_model=None)
async def metrics(
    format: Optional[str] = Query(None, description="json (the default), prometheus or openmetrics"),
    accept: Optional[str] = Header(None),
    state: IngressState = Depends(ingress_state),
) -> dict | Response:
    wanted = wanted_format(format, accept)
    if wanted == JSON:
        return await ServingMetrics(state).summary()
    body, content_type = await ServingMetrics(state).exposition(wanted)
    return Response(body, media_type=content_type)
