"""Embeddings on the embeddings slot (POST /v1/embeddings, OpenAI's shape: float or base64
vectors); the slot batches and embeds, and answers the response whole."""

from __future__ import annotations

from deployments.ingress.serving.keep_alive import keep_model_alive
from deployments.ingress.state import IngressState
from deployments.protocol.embeddings import EmbeddingRequest, EmbeddingResponse


class ServingEmbeddings:
    def __init__(self, state: IngressState):
        self.state = state
        self.embeddings = state.slot("embeddings")

    async def create(self, request: EmbeddingRequest) -> EmbeddingResponse:
        model = self.state.catalog.resolve("embeddings", request.model)
        response = await self.embeddings.call("embed", request, model=model)
        await keep_model_alive(self.state, "embeddings", response.model, request.keep_alive)
        return response
