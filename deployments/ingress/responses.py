"""The ingress's response framing, used by every route: JSON bodies and SSE streams."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from deployments.ingress.errors import from_exception
from deployments.protocol.sse import SSE_DONE, SSE_HEADERS, SSE_MEDIA_TYPE, sse_data


def json_response(model: BaseModel, status_code: int = 200) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"), status_code=status_code)


KEEP_ALIVE = b": keep-alive\n\n"


def sse_response(events: AsyncIterator[BaseModel | dict | bytes | None], end: bytes = SSE_DONE) -> StreamingResponse:
    """Frame events as SSE, then `end` ([DONE]); a failure mid-stream becomes an error event.
    A `None` event is a keep-alive comment (long streams that may stay quiet: jobs, downloads);
    `bytes` are an event framed already (protocol.sse.SSEFrame: a token stream's deltas)."""

    async def body() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                if isinstance(event, bytes):
                    yield event
                else:
                    yield KEEP_ALIVE if event is None else sse_data(event)
        except Exception as e:  # headers are gone: report inside the stream
            yield sse_data(from_exception(e).body())
        yield end

    return StreamingResponse(body(), media_type=SSE_MEDIA_TYPE, headers=SSE_HEADERS)
