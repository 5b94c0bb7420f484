"""POST /v1/completions (legacy text completions) on the LLM slot."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, Header

from deployments.ingress.serving.generation import ServingCompletion
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.openai import CompletionRequest

router = APIRouter(tags=["completions"])


@router.post("/v1/completions")
async def create_completion(
    request: CompletionRequest,
    x_session_id: Optional[str] = Header(None, description="Keeps a conversation on one replica (docs/routing.md)"),
    state: IngressState = Depends(ingress_state),
):
    return await ServingCompletion(state).create(request, x_session_id)
