"""GET /metrics: a JSON summary of the counters (as MiniInfer offers), behind the API key.

Prometheus scrapes the same numbers (and Ray Serve's own) from Ray's metrics export; this route
is for people and scripts. Counts are per ingress replica; each slot's numbers come from the
one replica of that slot that answers the call (ASR and TTS name it: `replica`); the image
slot's include the running generation's progress.
"""

import asyncio

from fastapi import APIRouter, Depends

from deployments.ingress.state import IngressState, ingress_state

router = APIRouter(tags=["metrics"])

# The slot method that reports its numbers (the LLM's stats carry its engines' counts too).
SLOT_SUMMARIES = {"llm": "stats", "asr": "metrics_summary", "tts": "metrics_summary", "image": "stats"}


@router.get("/metrics")
async def metrics(state: IngressState = Depends(ingress_state)) -> dict:
    out = {"ingress": state.metrics.summary()}
    slots = [(slot, state.slot_handle(slot)) for slot in SLOT_SUMMARIES]
    slots = [(slot, handle) for slot, handle in slots if handle is not None]
    answers = await asyncio.gather(*[_summary(handle, SLOT_SUMMARIES[slot]) for slot, handle in slots])
    out.update({slot: answer for (slot, _), answer in zip(slots, answers)})
    return out


async def _summary(handle, method: str) -> dict:
    try:
        return await asyncio.wait_for(getattr(handle, method).remote(), timeout=5)
    except Exception as e:  # a slot that cannot answer must not break the summary
        return {"error": f"{type(e).__name__}: {e}"}
