"""Readiness: GET /readyz and GET /v1/models/status, both live-probing the CUDA worker when a
CUDA route is configured. (/health stays process liveness only.)"""

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from deployments.ingress.cuda import NOT_CONFIGURED_STATUS, cuda_status
from deployments.ingress.state import IngressState, ingress_state

router = APIRouter(tags=["health"])

# The /v1/models/status keys OminiX-API reports, one per model slot kind.
STATUS_SLOTS = ("llm", "asr", "tts", "qwen3_tts", "image", "vlm")


@router.get("/readyz")
async def readyz(state: IngressState = Depends(ingress_state)):
    status = await cuda_status(state)
    if status is None:
        return {"status": "ready", "sglang_cuda": {"configured": False}}
    ready = status["model_ready"]
    body = {"status": "ready" if ready else "not_ready", "sglang_cuda": status}
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/v1/models/status")
async def models_status(state: IngressState = Depends(ingress_state)):
    models = {slot: (state.catalog.slots.get(slot) or [None])[0] for slot in STATUS_SLOTS}
    status = await cuda_status(state)
    return {"status": "success", "models": models, "sglang_cuda": status or NOT_CONFIGURED_STATUS}
