"""POST /v1/vlm/completions on the VLM slot (OminiX-API's shape: one base64 image, a prompt)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from deployments.ingress.serving.vlm import ServingVLMCompletion
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.vision import VLMCompletionRequest, VLMCompletionResponse

router = APIRouter(tags=["vision"])


@router.post("/v1/vlm/completions", response_model=VLMCompletionResponse)
async def create_vlm_completion(request: VLMCompletionRequest, state: IngressState = Depends(ingress_state)):
    return await ServingVLMCompletion(state).create(request)
