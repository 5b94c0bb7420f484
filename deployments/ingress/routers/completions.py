"""POST /v1/completions (legacy text completions) on the LLM slot."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from deployments.ingress.serving.generation import ServingCompletion
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.openai import CompletionRequest

router = APIRouter(tags=["completions"])


@router.post("/v1/completions")
async def create_completion(request: CompletionRequest, state: IngressState = Depends(ingress_state)):
    return await ServingCompletion(state).create(request)
