"""POST /v1/embeddings on the embeddings slot (OpenAI's shape: float or base64 vectors)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from deployments.ingress.serving.embeddings import ServingEmbeddings
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.embeddings import EmbeddingRequest, EmbeddingResponse

router = APIRouter(tags=["embeddings"])


@router.post("/v1/embeddings", response_model=EmbeddingResponse)
async def create_embeddings(request: EmbeddingRequest, state: IngressState = Depends(ingress_state)):
    return await ServingEmbeddings(state).create(request)
