"""GET /v1/models: the OpenAI model list, one entry per model id the graph serves."""

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from deployments.ingress.cuda import cuda_model_cards
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import APIError
from deployments.protocol.openai import ModelCard, ModelList

router = APIRouter(tags=["models"])


async def all_cards(state: IngressState) -> list[ModelCard]:
    # CUDA-routed ids first, and only while their worker is ready (spec 3.4).
    return [*await cuda_model_cards(state), *state.catalog.cards()]


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
