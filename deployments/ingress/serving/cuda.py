"""The ingress side of the CUDA route: chat requests whose `model` is exactly a mapped id go
to the CudaProxy deployment (fail closed: never to a local slot), and the route's live
readiness feeds /readyz, /v1/models and /v1/models/status.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Optional

from fastapi.responses import JSONResponse, StreamingResponse

from deployments.cuda_proxy.protocol import CudaChatRequest
from deployments.ingress.errors import from_exception, validate_body
from deployments.ingress.responses import json_response, sse_response
from deployments.ingress.state import IngressState
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import ModelCard

NOT_CONFIGURED_STATUS = {"configured": False, "models": [], "shim_reachable": False, "model_ready": False}


class CudaModelCard(ModelCard):
    """A /v1/models entry for a CUDA-routed id, shaped as OminiX-API lists one."""

    owned_by: str = "ominix-sglang"
    type: str = "llm"
    backend: str = "cuda-worker-v0"
    endpoints: list[str] = ["/v1/chat/completions"]


def routes_to_cuda(state: IngressState, body: dict[str, Any]) -> bool:
    """Exact, case-sensitive match of the request's model against the mapped ids."""
    model = body.get("model")
    return state.cuda is not None and isinstance(model, str) and model in state.cuda_models


async def serve_cuda_chat(state: IngressState, body: dict[str, Any]) -> JSONResponse | StreamingResponse:
    request = validate_body(CudaChatRequest, body)
    if request.stream:
        # Errors up to the first chunk keep their HTTP status; later ones become an error event.
        stream = await state.cuda.stream("stream", request)
        return sse_response(stream.chunks())
    return json_response(await state.cuda.call("complete", request))


async def open_cuda_chat(state: IngressState, body: dict[str, Any]) -> tuple[AsyncIterator[GenerationChunk], str]:
    """A chat request on the CUDA route as generation chunks (text deltas, then the finish with
    the usage), for a protocol that shapes the answer its own way; the route's own rules apply."""
    request = validate_body(CudaChatRequest, {**body, "stream": True})
    stream = await state.cuda.stream("stream", request)

    async def chunks() -> AsyncIterator[GenerationChunk]:
        async for chunk in stream.chunks():
            for choice in chunk.choices:
                yield GenerationChunk(
                    content=choice.delta.content or "", finish_reason=choice.finish_reason, usage=chunk.usage
                )

    return chunks(), (stream.first.model if stream.first is not None else None) or request.model


async def cuda_status(state: IngressState) -> Optional[dict[str, Any]]:
    """The live probe object, or None when no CUDA route is configured."""
    if state.cuda is None:
        return None
    try:
        return await state.cuda.call("readiness")
    except Exception as e:  # the proxy deployment itself is down: not ready, say why
        return {
            "configured": True,
            "models": sorted(state.cuda_models),
            "shim_reachable": False,
            "model_ready": False,
            "reason": f"CUDA proxy unavailable: {from_exception(e).message}",
        }


async def cuda_model_cards(state: IngressState) -> list[ModelCard]:
    """Mapped ids, listed only while a live probe says the worker's model is ready."""
    status = await cuda_status(state)
    if not status or not status["model_ready"]:
        return []
    return [CudaModelCard(id=model) for model in status["models"]]
