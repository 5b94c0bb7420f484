"""GET /metrics: a JSON summary of the counters (as MiniInfer offers), behind the API key.

Prometheus scrapes the same numbers (and Ray Serve's own) from Ray's metrics export; this route
is for people and scripts. Counts are per ingress replica; the LLM and image numbers come from
one replica of the slot per call (the image slot's include the running generation's progress).
"""

import asyncio

from fastapi import APIRouter, Depends

from deployments.ingress.state import IngressState, ingress_state

router = APIRouter(tags=["metrics"])


@router.get("/metrics")
async def metrics(state: IngressState = Depends(ingress_state)) -> dict:
    out = {"ingress": state.metrics.summary()}
    for slot in ("llm", "image"):
        handle = state.slot_handle(slot)
        if handle is None:
            continue
        try:
            out[slot] = await asyncio.wait_for(handle.stats.remote(), timeout=5)
        except Exception as e:  # a slot that cannot answer must not break the summary
            out[slot] = {"error": f"{type(e).__name__}: {e}"}
    return out
