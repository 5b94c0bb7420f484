"""Operating the slots at runtime: readiness, per-replica status, load/unload, disk report,
version and capabilities (OminiX-API's /readyz, /v1/models/status|load|unload|report, /version),
and clearing the LLM prompt cache's disk tier (/v1/models/cache/clear).
The work is ServingModels' (ingress/serving/models.py); these routes parse and answer.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import AliasChoices, BaseModel, Field

from deployments.ingress.serving.models import ServingModels
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.models import LoadResponse, ModelsStatus, UnloadResponse

router = APIRouter(tags=["model management"])


class LoadRequest(BaseModel):
    model: str = Field(..., min_length=1, validation_alias=AliasChoices("model", "model_id"))
    model_type: str = "llm"


class UnloadRequest(BaseModel):
    model_type: str


@router.get("/readyz")
async def readyz(state: IngressState = Depends(ingress_state)):
    """200 once every slot serves its default model (and a configured CUDA worker is ready);
    else 503 with the reasons."""
    body, ready = await ServingModels(state).readiness()
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/v1/models/status", response_model=ModelsStatus)
async def models_status(state: IngressState = Depends(ingress_state)):
    return await ServingModels(state).status()


@router.post("/v1/models/load", response_model=LoadResponse)
async def load_model(request: LoadRequest, state: IngressState = Depends(ingress_state)):
    return await ServingModels(state).load(request.model_type, request.model)


@router.post("/v1/models/unload", response_model=UnloadResponse)
async def unload_model(request: UnloadRequest, state: IngressState = Depends(ingress_state)):
    return await ServingModels(state).unload(request.model_type)


@router.get("/v1/models/report")
async def models_report(state: IngressState = Depends(ingress_state)):
    return await ServingModels(state).report()


@router.post("/v1/models/cache/clear")
async def clear_prompt_cache(state: IngressState = Depends(ingress_state)):
    """Empty the LLM prompt cache's disk tier on the node of the replica that answers."""
    return await ServingModels(state).clear_prompt_cache()


@router.get("/v1/version")
@router.get("/version")
async def version_info(state: IngressState = Depends(ingress_state)):
    return await ServingModels(state).version()
