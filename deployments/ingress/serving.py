"""What the OpenAI text routes share: calling the LLM slot and turning its stream of
`GenerationChunk`s into a JSON response or an SSE stream.

Routers build the request-specific parts (`to_events`, `to_response`); this module picks the
model, opens the slot's stream (errors before its first chunk keep their HTTP status) and
returns the response.
"""

from __future__ import annotations

from typing import AsyncIterator, Callable

from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from deployments.ingress.clients import SlotStream
from deployments.ingress.responses import json_response, sse_response
from deployments.ingress.state import IngressState
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import SamplingRequest

# Both get the resolved model id, which responses echo.
StreamBuilder = Callable[[SlotStream, str], AsyncIterator[BaseModel | dict]]
FullBuilder = Callable[[GenerationChunk, str], BaseModel]


async def serve_generation(
    state: IngressState,
    method: str,
    request: SamplingRequest,
    to_events: StreamBuilder,
    to_response: FullBuilder,
) -> JSONResponse | StreamingResponse:
    """Shared body of /v1/chat/completions and /v1/completions."""
    llm = state.slot("llm")
    model = state.catalog.resolve("llm", request.model)
    stream = await llm.stream(method, request, model=model)
    model = (stream.first.model if stream.first else None) or model or "unknown"
    if request.stream:
        return sse_response(to_events(stream, model))
    return json_response(to_response(await stream.collect(), model))
