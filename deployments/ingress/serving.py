"""What the OpenAI text routes share: calling the LLM slot through its handle and turning
its stream of `GenerationChunk`s into an HTTP response.

The first chunk is awaited before any byte is sent, so a request that fails early (unknown
model, prompt too long, model cannot load) still gets its proper 4xx/5xx status and error
body; after that, errors can only be reported inside the stream.
"""

from __future__ import annotations

import logging
from typing import Any, AsyncIterator, Callable, Optional

from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from deployments.ingress.errors import from_exception
from deployments.ingress.state import IngressState
from deployments.protocol.errors import unavailable
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import SamplingRequest
from deployments.protocol.sse import SSE_DONE, SSE_HEADERS, SSE_MEDIA_TYPE, sse_data
from deployments.routing.affinity import llm_affinity_key
from deployments.routing.router import request_session_header

logger = logging.getLogger("ray.serve")


class SlotStream:
    """An LLM slot's response stream, opened and checked up to its first chunk."""

    def __init__(self, response_gen: Any, first: Optional[GenerationChunk]):
        self._gen = response_gen
        self.first = first

    @classmethod
    async def open(cls, state: IngressState, method: str, request: SamplingRequest, model: Optional[str]):
        if state.llm is None:
            raise unavailable("The LLM slot is not enabled in this graph")
        # No model named: any replica, which serves the slot's current default.
        options = {"multiplexed_model_id": model} if model else {}
        # The conversation's key: the slot's router keeps it on the replica holding its prefix cache.
        options["session_id"] = llm_affinity_key(request, request_session_header())
        handle = state.llm.options(stream=True, **options)
        return await cls.start(getattr(handle, method).remote(request))

    @classmethod
    async def start(cls, gen: Any) -> "SlotStream":
        """Wrap a slot's streaming call, awaiting its first chunk (errors surface here)."""
        try:
            first = await gen.__anext__()
        except StopAsyncIteration:
            first = None
        except BaseException as e:
            gen.cancel()
            raise from_exception(e) from None
        return cls(gen, first)

    async def chunks(self) -> AsyncIterator[GenerationChunk]:
        """All chunks, the first included. Leaving early cancels the generation in the slot."""
        finished = False
        try:
            if self.first is not None:
                yield self.first
                async for chunk in self._gen:
                    yield chunk
            finished = True
        finally:
            if not finished:
                self._gen.cancel()

    async def collect(self) -> GenerationChunk:
        total = GenerationChunk()
        async for chunk in self.chunks():
            total = total.merge(chunk)
        return total


def json_response(model: BaseModel) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"))


def sse_response(events: AsyncIterator[BaseModel | dict], end: bytes = SSE_DONE) -> StreamingResponse:
    """Frame model events as SSE, then `end` ([DONE]); a failure mid-stream becomes an error event."""

    async def body() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                yield sse_data(event)
        except Exception as e:  # headers are gone: report inside the stream
            yield sse_data(from_exception(e).body())
        yield end

    return StreamingResponse(body(), media_type=SSE_MEDIA_TYPE, headers=SSE_HEADERS)


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
    model = state.catalog.resolve("llm", request.model)
    stream = await SlotStream.open(state, method, request, model)
    model = (stream.first.model if stream.first else None) or model or "unknown"
    if request.stream:
        return sse_response(to_events(stream, model))
    try:
        total = await stream.collect()
    except Exception as e:
        raise from_exception(e) from None
    return json_response(to_response(total, model))
