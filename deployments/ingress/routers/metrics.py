"""GET /metrics: a JSON summary of the counters (as MiniInfer offers), behind the API key.

Prometheus scrapes the same numbers (and Ray Serve's own) from Ray's metrics export; this route
is for people and scripts. Counts are per ingress replica; `ServingMetrics`
(ingress/serving/metrics.py) adds each slot's numbers.
"""

from fastapi import APIRouter, Depends

from deployments.ingress.serving.metrics import ServingMetrics
from deployments.ingress.state import IngressState, ingress_state

router = APIRouter(tags=["metrics"])


@router.get("/metrics")
async def metrics(state: IngressState = Depends(ingress_state)) -> dict:
    return await ServingMetrics(state).summary()
