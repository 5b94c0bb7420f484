"""GET /metrics: a JSON summary of the counters (as MiniInfer offers), behind the API key.

Prometheus scrapes the same numbers (and Ray Serve's own) from Ray's metrics export; this route
is for people and scripts. Counts are per ingress replica; each slot's numbers come from the
one replica of that slot that answers the call, which names itself (`replica`); every slot
answers the same `metrics_summary()` (deployments/slot_replica.py).
"""

import asyncio

from fastapi import APIRouter, Depends

from deployments.ingress.state import IngressState, ingress_state

router = APIRouter(tags=["metrics"])

SUMMARY_TIMEOUT_S = 5


@router.get("/metrics")
async def metrics(state: IngressState = Depends(ingress_state)) -> dict:
    names = list(state.slots)
    answers = await asyncio.gather(*[_summary(state.slots[name]) for name in names])
    return {"ingress": state.metrics.summary(), **dict(zip(names, answers))}


async def _summary(client) -> dict:
    try:
        return await asyncio.wait_for(client.call("metrics_summary"), timeout=SUMMARY_TIMEOUT_S)
    except Exception as e:  # a slot that cannot answer must not break the summary
        return {"error": f"{type(e).__name__}: {e}"}
