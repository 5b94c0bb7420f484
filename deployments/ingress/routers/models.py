"""GET /v1/models: the OpenAI model list, one entry per model id the graph serves."""

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from deployments.ingress.serving.models import ServingModels
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import APIError
from deployments.protocol.openai import ModelList

router = APIRouter(tags=["models"])


@router.get("/v1/models")
async def list_models(state: IngressState = Depends(ingress_state)):
    # serialize_as_any: CUDA cards carry an extra `backend` field.
    cards = await ServingModels(state).cards()
    return JSONResponse(ModelList(data=cards).model_dump(mode="json", serialize_as_any=True))


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(model_id: str, state: IngressState = Depends(ingress_state)):
    for card in await ServingModels(state).cards():
        if card.id == model_id:
            return JSONResponse(card.model_dump(mode="json"))
    raise APIError(404, f"The model '{model_id}' does not exist", "invalid_request_error", "model", "model_not_found")
