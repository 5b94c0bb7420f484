"""POST /v1/completions (legacy text completions) on the LLM slot."""

from __future__ import annotations

from typing import AsyncIterator

from fastapi import APIRouter, Depends

from deployments.ingress.clients import SlotStream
from deployments.ingress.serving import serve_generation
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import (
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    random_id,
)

router = APIRouter(tags=["completions"])


@router.post("/v1/completions")
async def create_completion(
    request: CompletionRequest, state: IngressState = Depends(ingress_state)
):
    request_id = random_id("cmpl")
    echo = request.prompt if request.echo and isinstance(request.prompt, str) else ""

    def to_response(total: GenerationChunk, model: str) -> CompletionResponse:
        choice = CompletionChoice(text=echo + total.content, finish_reason=total.finish_reason)
        return CompletionResponse(id=request_id, model=model, choices=[choice], usage=total.usage)

    async def to_events(stream: SlotStream, model: str) -> AsyncIterator[CompletionResponse]:
        def event(text: str, finish_reason=None, usage=None) -> CompletionResponse:
            choices = [] if usage else [CompletionChoice(text=text, finish_reason=finish_reason)]
            return CompletionResponse(id=request_id, model=model, choices=choices, usage=usage)

        if echo:
            yield event(echo)
        usage = None
        async for part in stream.chunks():
            if part.content or part.finish_reason:
                yield event(part.content, part.finish_reason)
            usage = part.usage or usage
        if request.include_usage() and usage is not None:
            yield event("", usage=usage)

    return await serve_generation(state, "completions", request, to_events, to_response)
