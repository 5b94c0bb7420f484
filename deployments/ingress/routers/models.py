"""GET /v1/models: the OpenAI model list, one entry per model id the graph serves."""

import asyncio

from fastapi import APIRouter, Depends

from deployments.ingress.serving import json_response
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import APIError
from deployments.protocol.openai import ModelList

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


@router.get("/v1/models")
async def list_models(state: IngressState = Depends(ingress_state)):
    return json_response(ModelList(data=state.catalog.cards(await _loaded(state))))


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(model_id: str, state: IngressState = Depends(ingress_state)):
    for card in state.catalog.cards(await _loaded(state)):
        if card.id == model_id:
            return json_response(card)
    raise APIError(404, f"The model '{model_id}' does not exist", "invalid_request_error", "model", "model_not_found")
