"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API served by
translation onto the chat generation path (`open_chat`, ingress/serving/generation.py), so the
CUDA route, the VLM for images, limits, batching and the prefix cache apply as to a chat
completion. The shapes are deployments/protocol/anthropic.py's; errors on these routes are
Anthropic's shape (ingress/errors.py picks it by path).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Optional

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from deployments.ingress.errors import from_exception, validate_body, validation_error
from deployments.ingress.responses import sse_response
from deployments.ingress.serving.adapters import resolve_model
from deployments.ingress.serving.cuda import routes_to_cuda
from deployments.ingress.serving.generation import ChatGeneration, open_chat, serves_vision
from deployments.ingress.state import IngressState
from deployments.protocol.anthropic import (
    CHAT_TO_MESSAGES_PARAMS,
    CountTokensRequest,
    MessageEvents,
    MessagesRequest,
    chat_body,
    content_blocks,
    message_object,
    new_id,
)
from deployments.protocol.errors import APIError, invalid_request, renamed
from deployments.protocol.generation import GenerationChunk, collect_choices
from deployments.protocol.openai import ChatCompletionRequest
from deployments.protocol.sse import sse_event


class ServingMessages:
    def __init__(self, state: IngressState):
        self.state = state

    async def create(self, body: dict[str, Any], session_header: Optional[str] = None) -> Any:
        request = validate_body(MessagesRequest, body)
        chat = chat_body(request)
        generation = await self._open(chat, session_header)
        message_id = new_id("msg")
        if request.stream:
            return sse_response(self._events(generation, message_id), end=b"")
        choices, usage = collect_choices([chunk async for chunk in generation.chunks])
        total = choices.get(0, GenerationChunk())
        return JSONResponse(
            message_object(
                message_id, generation.model, content_blocks(total), total.finish_reason, total.stop_sequence, usage
            )
        )

    async def _open(self, chat: dict[str, Any], session_header: Optional[str]) -> ChatGeneration:
        try:
            return await open_chat(self.state, chat, session_header)
        except APIError as e:
            raise renamed(e, CHAT_TO_MESSAGES_PARAMS) from None
        except RequestValidationError as e:
            raise renamed(validation_error(e), CHAT_TO_MESSAGES_PARAMS) from None

    async def _events(self, generation: ChatGeneration, message_id: str) -> AsyncIterator[bytes]:
        stream = MessageEvents(message_id, generation.model)
        first = generation.first
        for event in stream.start(first.prompt_tokens if first else None):
            yield sse_event(event)
        finish_reason, stop_sequence, usage = None, None, None
        try:
            async for chunk in generation.chunks:
                for event in stream.feed(chunk):
                    yield sse_event(event)
                finish_reason = chunk.finish_reason or finish_reason
                stop_sequence = chunk.stop_sequence or stop_sequence
                usage = chunk.usage or usage
        except Exception as e:  # the answer began: the failure is an `error` event
            for event in stream.fail(from_exception(e)):
                yield sse_event(event)
            return
        for event in stream.finish(finish_reason, stop_sequence, usage):
            yield sse_event(event)

    async def count_tokens(self, body: dict[str, Any]) -> dict[str, int]:
        """The prompt's tokens through the LLM slot's own template and tokenizer."""
        request = validate_body(CountTokensRequest, body)
        chat = chat_body(request, stream=False)
        if routes_to_cuda(self.state, chat) or serves_vision(self.state, request.model):
            raise invalid_request(
                f"model: counting tokens is served for the LLM slot's models, not for '{request.model}'", "model"
            )
        try:
            chat_request = validate_body(ChatCompletionRequest, chat)
            model = await resolve_model(self.state, "llm", chat_request.model)
            tokens = await self.state.slot("llm").call("count_tokens", chat_request, model=model)
        except APIError as e:
            raise renamed(e, CHAT_TO_MESSAGES_PARAMS) from None
        except RequestValidationError as e:
            raise renamed(validation_error(e), CHAT_TO_MESSAGES_PARAMS) from None
        return {"input_tokens": tokens}
