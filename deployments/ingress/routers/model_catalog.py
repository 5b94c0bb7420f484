"""OminiX-API's model catalog and downloads: GET /v1/models/catalog, POST /v1/models/download,
GET /v1/models/download/progress (SSE), POST /v1/models/download/cancel, POST /v1/models/remove,
POST /v1/models/scan. The work is ModelDownloads' (ingress/serving/downloads.py)."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, Query
from pydantic import AliasChoices, BaseModel, Field

from deployments.ingress.responses import sse_response
from deployments.ingress.serving.downloads import ModelDownloads
from deployments.ingress.state import IngressState, ingress_state

router = APIRouter(tags=["model management"])


class ModelIdRequest(BaseModel):
    model_id: str = Field(..., min_length=1, validation_alias=AliasChoices("model_id", "model"))


@router.get("/v1/models/catalog")
async def model_catalog(state: IngressState = Depends(ingress_state)):
    models = await ModelDownloads(state).entries()
    return {"models": models, "total": len(models)}


@router.post("/v1/models/download")
async def download_model(request: ModelIdRequest, state: IngressState = Depends(ingress_state)):
    return await ModelDownloads(state).download(request.model_id)


@router.get("/v1/models/download/progress")
async def download_progress(model_id: Optional[str] = Query(None), state: IngressState = Depends(ingress_state)):
    """SSE `data:` events, the current state first; the stream ends when the watched
    downloads are complete (OminiX-API's never ends)."""
    return sse_response(ModelDownloads(state).progress(model_id), end=b"")


@router.post("/v1/models/download/cancel")
async def cancel_download(request: ModelIdRequest, state: IngressState = Depends(ingress_state)):
    return ModelDownloads(state).cancel(request.model_id)


@router.post("/v1/models/remove")
async def remove_model(request: ModelIdRequest, state: IngressState = Depends(ingress_state)):
    return await ModelDownloads(state).remove(request.model_id)


@router.post("/v1/models/scan")
async def scan_models(state: IngressState = Depends(ingress_state)):
    return await ModelDownloads(state).scan()
