"""GET /v1/models: the OpenAI model list, one entry per model id the graph serves."""

import asyncio

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from deployments.ingress.cuda import cuda_model_cards
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import APIError
from deployments.protocol.openai import ModelCard, ModelList

router = APIRouter(tags=["models"])


async def _loaded(state: IngressState) -> dict[str, set[str]]:
    """slot -> models loaded on at least one replica (empty if the control plane is away)."""
    if state.control is None:
        return {}
    try:
        status = await asyncio.wait_for(state.control.status.remote(), 5)
    except Exception:
        return {}
    return {slot: {m for r in info["replicas"] for m in r["loaded_models"]} for slot, info in status.items()}


async def all_cards(state: IngressState) -> list[ModelCard]:
    # CUDA-routed ids first, and only while their worker is ready (spec 3.4).
    return [*await cuda_model_cards(state), *state.catalog.cards(await _loaded(state))]


@router.get("/v1/models")
async def list_models(state: IngressState = Depends(ingress_state)):
    # serialize_as_any: CUDA cards carry an extra `backend` field.
    return JSONResponse(ModelList(data=await all_cards(state)).model_dump(mode="json", serialize_as_any=True))


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(model_id: str, state: IngressState = Depends(ingress_state)):
    for card in await all_cards(state):
        if card.id == model_id:
            return JSONResponse(card.model_dump(mode="json"))
    raise APIError(404, f"The model '{model_id}' does not exist", "invalid_request_error", "model", "model_not_found")
