"""Chat and text completions on the LLM slot: `ServingChat` and `ServingCompletion` turn the
slot's stream of `GenerationChunk`s into OpenAI's JSON response or SSE chunks.

Both pick the model, open the slot's stream (errors before its first chunk keep their HTTP
status) and answer; each builds its own response shapes. A constrained answer (`response_format`,
`tool_choice`) is checked here first: a schema the grammar engine cannot compile, or a forced
tool that is not there, is a 400 that never reaches a replica (deployments/llm/constraints.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Optional

from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from deployments.ingress.clients import SlotStream
from deployments.ingress.responses import json_response, sse_response
from deployments.ingress.state import IngressState
from deployments.llm.constraints import checked_constraint
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    DeltaMessage,
    SamplingRequest,
    ToolCallDelta,
    now,
    random_id,
)
from deployments.protocol.sse import HOLE, SSEFrame
from deployments.routing.affinity import llm_affinity_key

# Both get the resolved model id, which responses echo.
StreamBuilder = Callable[[SlotStream, str], AsyncIterator[BaseModel | dict | bytes]]
FullBuilder = Callable[[GenerationChunk, str], BaseModel]


async def serve_generation(
    state: IngressState,
    method: str,
    request: SamplingRequest,
    session_header: Optional[str],
    to_events: StreamBuilder,
    to_response: FullBuilder,
    slot: str = "llm",
    args: tuple = (),
) -> JSONResponse | StreamingResponse:
    """Shared body of /v1/chat/completions (on the LLM or the VLM slot) and /v1/completions.
    `args` follow the request in the slot call (the VLM's images)."""
    if slot == "llm":
        # Compiling a large schema takes milliseconds: off the event loop.
        await asyncio.to_thread(checked_constraint, request)
    client = state.slot(slot)
    model = state.catalog.resolve(slot, request.model)
    # The conversation's key: the slot's router keeps it on the replica holding its prefix cache.
    session = llm_affinity_key(request, session_header)
    stream = await client.stream(method, request, *args, model=model, session=session)
    model = (stream.first.model if stream.first else None) or model or "unknown"
    if request.stream:
        return sse_response(to_events(stream, model))
    return json_response(to_response(await stream.collect(), model))


class ServingChat:
    """POST /v1/chat/completions on a local slot: the LLM, or the VLM with the request's images."""

    def __init__(self, state: IngressState, slot: str = "llm", images: tuple[bytes, ...] | None = None):
        self.state = state
        self.slot = slot
        self.args = () if images is None else (list(images),)

    async def create(
        self, request: ChatCompletionRequest, session_header: Optional[str] = None
    ) -> JSONResponse | StreamingResponse:
        """`session_header`: the client's x-session-id, a routing key when the body has none."""
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
            return chat_events(stream, request_id, model, request.include_usage())

        return await serve_generation(
            self.state, "chat", request, session_header, to_events, to_response, self.slot, self.args
        )


async def chat_events(
    stream: SlotStream, request_id: str, model: str, include_usage: bool
) -> AsyncIterator[ChatCompletionChunk | bytes]:
    created = now()  # one timestamp for the whole stream, as OpenAI's chunks carry

    def chunk(delta: DeltaMessage, finish_reason=None) -> ChatCompletionChunk:
        choices = [ChatChunkChoice(delta=delta, finish_reason=finish_reason)]
        return ChatCompletionChunk(id=request_id, created=created, model=model, choices=choices)

    # Most events carry only answer text: framed once, then one string encoded per token.
    content_event = SSEFrame(chunk(DeltaMessage(content=HOLE)))
    yield chunk(DeltaMessage(role="assistant", content=""))
    tool_index = 0
    usage = None
    async for part in stream.chunks():
        if part.content and not (part.reasoning_content or part.tool_calls or part.finish_reason):
            yield content_event(part.content)
            continue
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
        yield ChatCompletionChunk(id=request_id, created=created, model=model, choices=[], usage=usage)


class ServingCompletion:
    """POST /v1/completions (legacy text completions) on the LLM slot."""

    def __init__(self, state: IngressState):
        self.state = state

    async def create(
        self, request: CompletionRequest, session_header: Optional[str] = None
    ) -> JSONResponse | StreamingResponse:
        request_id = random_id("cmpl")
        echo = request.prompt if request.echo and isinstance(request.prompt, str) else ""

        def event(model: str, text: str, finish_reason=None, usage=None) -> CompletionResponse:
            choices = [] if usage else [CompletionChoice(text=text, finish_reason=finish_reason)]
            return CompletionResponse(id=request_id, model=model, choices=choices, usage=usage)

        def to_response(total: GenerationChunk, model: str) -> CompletionResponse:
            choice = CompletionChoice(text=echo + total.content, finish_reason=total.finish_reason)
            return CompletionResponse(id=request_id, model=model, choices=[choice], usage=total.usage)

        async def to_events(stream: SlotStream, model: str) -> AsyncIterator[CompletionResponse]:
            if echo:
                yield event(model, echo)
            usage: Optional[object] = None
            async for part in stream.chunks():
                if part.content or part.finish_reason:
                    yield event(model, part.content, part.finish_reason)
                usage = part.usage or usage
            if request.include_usage() and usage is not None:
                yield event(model, "", usage=usage)

        return await serve_generation(self.state, "completions", request, session_header, to_events, to_response)
