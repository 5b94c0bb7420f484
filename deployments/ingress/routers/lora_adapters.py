"""vLLM's run-time LoRA adapter routes: POST /v1/load_lora_adapter and /v1/unload_lora_adapter,
behind the API key like every admin route. The work is ServingAdapters' (ingress/serving/
adapters.py); these parse the body and answer with vLLM's line of text."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from deployments.ingress.serving.adapters import ServingAdapters
from deployments.ingress.state import IngressState, ingress_state

router = APIRouter(tags=["model management"])


class LoadLoRAAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    lora_name: str = Field(..., min_length=1, max_length=256, description="The name requests use as `model`")
    lora_path: str = Field(
        ..., min_length=1, max_length=4096, description="A local directory or Hugging Face repo id of mlx-lm's files"
    )
    base_model_name: Optional[str] = Field(
        None, min_length=1, description="The model it runs on (an allowed LLM model); unset: the slot's default now"
    )


class UnloadLoRAAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    lora_name: str = Field(..., min_length=1, max_length=256)


@router.post("/v1/load_lora_adapter", response_class=PlainTextResponse)
async def load_lora_adapter(request: LoadLoRAAdapterRequest, state: IngressState = Depends(ingress_state)):
    text = await ServingAdapters(state).load(request.lora_name, request.lora_path, request.base_model_name)
    return PlainTextResponse(text)


@router.post("/v1/unload_lora_adapter", response_class=PlainTextResponse)
async def unload_lora_adapter(request: UnloadLoRAAdapterRequest, state: IngressState = Depends(ingress_state)):
    return PlainTextResponse(await ServingAdapters(state).unload(request.lora_name))
