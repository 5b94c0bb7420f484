"""POST /v1/chat/completions on the LLM slot: JSON or true token streaming (SSE).
Requests for CUDA-mapped model ids go to the CUDA proxy instead (see ingress/cuda.py)."""

from __future__ import annotations

from typing import Any, AsyncIterator

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel

from deployments.ingress.cuda import routes_to_cuda, serve_cuda_chat
from deployments.ingress.errors import validate_body
from deployments.ingress.clients import SlotStream
from deployments.ingress.serving import serve_generation
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    DeltaMessage,
    ToolCallDelta,
    random_id,
)

router = APIRouter(tags=["chat"])


def _inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with its `$defs` inlined, for an OpenAPI requestBody (the body
    is parsed in the route, so FastAPI cannot document it by itself)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


CHAT_REQUEST_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": _inline_schema(ChatCompletionRequest)}},
    }
}


@router.post("/v1/chat/completions", openapi_extra=CHAT_REQUEST_DOC)
async def create_chat_completion(
    body: dict[str, Any] = Body(..., description="An OpenAI chat completion request"),
    state: IngressState = Depends(ingress_state),
):
    # Routing comes before validation: a CUDA-mapped id is answered by the CUDA route's own
    # rules (and never by a local slot), everything else by the local LLM slot.
    if routes_to_cuda(state, body):
        return await serve_cuda_chat(state, body)
    request: ChatCompletionRequest = validate_body(ChatCompletionRequest, body)
    request_id = random_id("chatcmpl")

    def to_response(total: GenerationChunk, model: str) -> ChatCompletionResponse:
        message = AssistantMessage(
            content=total.content if (total.content or not total.tool_calls) else None,
            reasoning_content=total.reasoning_content or None,
            tool_calls=total.tool_calls or None,
        )
        choice = ChatChoice(message=message, finish_reason=total.finish_reason)
        return ChatCompletionResponse(id=request_id, model=model, choices=[choice], usage=total.usage)

    def to_events(stream: SlotStream, model: str) -> AsyncIterator[ChatCompletionChunk]:
        return _chat_events(stream, request_id, model, request.include_usage())

    return await serve_generation(state, "chat", request, to_events, to_response)


async def _chat_events(
    stream: SlotStream, request_id: str, model: str, include_usage: bool
) -> AsyncIterator[ChatCompletionChunk]:
    def chunk(delta: DeltaMessage, finish_reason=None) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=request_id,
            model=model,
            choices=[ChatChunkChoice(delta=delta, finish_reason=finish_reason)],
        )

    yield chunk(DeltaMessage(role="assistant", content=""))
    tool_index = 0
    usage = None
    async for part in stream.chunks():
        tool_deltas = []
        for call in part.tool_calls:
            tool_deltas.append(ToolCallDelta(index=tool_index, **call.model_dump()))
            tool_index += 1
        if part.content or part.reasoning_content or tool_deltas:
            yield chunk(
                DeltaMessage(
                    content=part.content or None,
                    reasoning_content=part.reasoning_content or None,
                    tool_calls=tool_deltas or None,
                )
            )
        if part.finish_reason is not None:
            usage = part.usage
            yield chunk(DeltaMessage(), part.finish_reason)
    if include_usage and usage is not None:
        yield ChatCompletionChunk(id=request_id, model=model, choices=[], usage=usage)
