"""HTTP client of the OminiX-SGLang worker-v0 shim: readiness probes, generate (whole or
streamed), and best-effort abort. Answers in OpenAI shapes and raises `APIError`s that already
carry the public status and message, so the Serve deployment around it stays a thin wrapper.

Ray-free and MLX-free: tests drive it against a fake shim on a loopback socket.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, Optional

import httpx

from deployments.cuda_proxy.config import CudaRoute
from deployments.cuda_proxy.protocol import (
    CudaChatRequest,
    InvalidStream,
    NotReady,
    ProtocolError,
    ShimError,
    TransportError,
    UpstreamStatus,
    UpstreamTimeout,
    WorkerStream,
    abort_envelope,
    check_supported,
    error_detail,
    generate_envelope,
    http_error,
    model_problem,
    new_request_id,
    production_shim_problem,
    stream_error,
)
from deployments.cuda_proxy.sse import SSEDecodeError, SSEDecoder
from deployments.protocol.openai import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    DeltaMessage,
)

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 3.0
ABORT_TIMEOUT_S = 2.0
PROBE_BODY_LIMIT = 64 * 1024
FULL_BODY_LIMIT = 64 * 1024 * 1024


class ShimClient:
    """One route's connection pool to its shim. Use one per process; close with `aclose`."""

    def __init__(self, route: CudaRoute, transport: Optional[httpx.AsyncBaseTransport] = None):
        self.route = route
        self._http = httpx.AsyncClient(
            base_url=route.base_url,
            headers={"Authorization": f"Bearer {route.token}"},
            timeout=httpx.Timeout(route.timeout_s, connect=CONNECT_TIMEOUT_S),
            trust_env=False,  # never send a paid request through an environment proxy
            follow_redirects=False,  # a redirect must not carry the bearer token elsewhere
            transport=transport,
        )
        self._background: set[asyncio.Task] = set()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- readiness -----------------------------------------------------------------------------

    async def readiness(self) -> dict[str, Any]:
        """The `sglang_cuda` object of /readyz, with a `reason` when the model is not ready."""
        status: dict[str, Any] = {
            "configured": True,
            "models": sorted(self.route.models),
            "served_model": self.route.served_model,
            "shim_reachable": False,
            "model_ready": False,
        }
        problem = await self._readiness_problem(status)
        status["model_ready"] = problem is None
        if problem is not None:
            status["reason"] = problem
        return status

    async def _readiness_problem(self, status: dict[str, Any]) -> Optional[str]:
        try:
            code, info = await self._probe("/server_info")
        except (httpx.HTTPError, TimeoutError) as e:
            return f"shim unreachable: {_describe(e)}"
        status["shim_reachable"] = True
        if not 200 <= code < 300:
            return f"server_info answered HTTP {code}"
        if (problem := production_shim_problem(info)) is not None:
            return problem
        try:
            code, info = await self._probe("/get_model_info")
        except (httpx.HTTPError, TimeoutError) as e:
            return f"get_model_info failed: {_describe(e)}"
        if not 200 <= code < 300:
            return f"get_model_info answered HTTP {code}"
        return model_problem(info, self.route.served_model)

    async def _probe(self, path: str) -> tuple[int, Any]:
        """GET a probe path within 3 s: the status and the JSON body (None if it is not JSON)."""
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            async with self._http.stream("GET", path, timeout=PROBE_TIMEOUT_S) as response:
                try:
                    body = await _read_limited(response, PROBE_BODY_LIMIT)
                    return response.status_code, json.loads(body)
                except (ProtocolError, ValueError):
                    return response.status_code, None

    async def _admit(self, request: CudaChatRequest) -> str:
        """Checks before any generate call (what the worker cannot serve is a 400, then a live
        readiness probe, as OminiX-API does); the new request id."""
        try:
            check_supported(request)
            status = await self.readiness()
            if not status["model_ready"]:
                logger.warning("CUDA route not ready: %s", status.get("reason"))
                raise NotReady(status.get("reason", "not ready"))
        except ShimError as e:
            raise http_error(e) from None
        return new_request_id()

    # -- generation ----------------------------------------------------------------------------

    async def complete(self, request: CudaChatRequest) -> ChatCompletionResponse:
        """A non-streaming chat completion; the worker still answers in SSE."""
        request_id = await self._admit(request)
        armed = True
        try:
            deadline = self._deadline()
            response = await self._open_generate(request, request_id, False, deadline)
            try:
                events = WorkerStream(request_id)
                async for _ in self._deltas(response, events, deadline, FULL_BODY_LIMIT):
                    pass
            finally:
                await response.aclose()
            armed = False
        except ShimError as e:
            logger.warning("CUDA request %s failed: %r", request_id, e)
            raise http_error(e) from None
        finally:
            if armed:
                self._abort_in_background(request_id)
        message = AssistantMessage(content=events.text)
        return ChatCompletionResponse(
            id=f"chatcmpl-{request_id}",
            model=request.model,  # the public id the client sent, never the served one
            choices=[ChatChoice(message=message, finish_reason=events.finish_reason)],
            usage=events.usage,
        )

    async def stream(self, request: CudaChatRequest) -> AsyncIterator[ChatCompletionChunk]:
        """True streaming: the role chunk as soon as the worker accepted, then one chunk per
        text delta, then the finish chunk with usage. Errors before the first chunk carry their
        HTTP status; later ones are raised with the mid-stream message."""
        request_id = await self._admit(request)
        armed = True
        response = None
        try:
            deadline = self._deadline()
            try:
                response = await self._open_generate(request, request_id, True, deadline)
            except ShimError as e:
                logger.warning("CUDA request %s failed: %r", request_id, e)
                raise http_error(e) from None
            chunk = _ChunkFactory(f"chatcmpl-{request_id}", request.model)
            yield chunk(DeltaMessage(role="assistant"))
            events = WorkerStream(request_id)
            try:
                async for delta in self._deltas(response, events, deadline, None):
                    if delta:
                        yield chunk(DeltaMessage(content=delta))
            except ShimError as e:
                logger.warning("CUDA stream %s failed: %r", request_id, e)
                raise stream_error(e) from None
            armed = False
            yield chunk(DeltaMessage(), events.finish_reason, usage=events.usage)
        finally:
            if armed:  # client gone, worker failed, or anything else: free the GPU
                self._abort_in_background(request_id)
            if response is not None:
                await response.aclose()

    async def abort(self, request_id: str) -> None:
        """POST /abort_request once, 2 s at most; failures are logged, never raised."""
        try:
            async with asyncio.timeout(ABORT_TIMEOUT_S):
                await self._http.post("/abort_request", json=abort_envelope(request_id), timeout=ABORT_TIMEOUT_S)
        except Exception as e:
            logger.warning("abort of CUDA request %s failed: %s", request_id, _describe(e))

    def _abort_in_background(self, request_id: str) -> None:
        # Fire-and-forget: the request that needs the abort may itself be being cancelled.
        task = asyncio.get_running_loop().create_task(self.abort(request_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self.route.timeout_s

    async def _open_generate(
        self, request: CudaChatRequest, request_id: str, stream: bool, deadline: float
    ) -> httpx.Response:
        """POST /generate and check status and content type; the body is left unread."""
        http_request = self._http.build_request(
            "POST",
            "/generate",
            json=generate_envelope(request, request_id, self.route, stream),
            headers={"Accept": "text/event-stream"},
        )
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._http.send(http_request, stream=True)
        except (TimeoutError, httpx.TimeoutException):
            raise UpstreamTimeout("generate: no response in time") from None
        except httpx.HTTPError as e:
            raise TransportError(f"generate: {_describe(e)}") from None
        if not response.is_success:
            try:
                body = await _read_limited(response, PROBE_BODY_LIMIT)
            except (ShimError, httpx.HTTPError):
                body = b""
            await response.aclose()
            raise UpstreamStatus(response.status_code, error_detail(body))
        content_type = response.headers.get("content-type", "")
        if not content_type.lower().startswith("text/event-stream"):
            await response.aclose()
            raise ProtocolError(f"generate answered Content-Type {content_type!r}")
        return response

    async def _deltas(
        self,
        response: httpx.Response,
        events: WorkerStream,
        deadline: float,
        body_limit: Optional[int],
    ) -> AsyncIterator[str]:
        """The worker's text deltas, each validated; ends only after a clean `[DONE]`."""
        decoder = SSEDecoder()
        received = 0
        async for data in _read_until(response, deadline):
            received += len(data)
            if body_limit is not None and received > body_limit:
                raise ProtocolError(f"generate body larger than {body_limit} bytes")
            for payload in _decode(decoder.feed, data):
                yield events.accept(payload)
        _decode(lambda _: decoder.finish(), b"")
        events.end()


class _ChunkFactory:
    """Stream chunks that share the response's id, creation time and public model id."""

    def __init__(self, chunk_id: str, model: str):
        self._template = ChatCompletionChunk(id=chunk_id, model=model, choices=[])

    def __call__(self, delta: DeltaMessage, finish_reason=None, usage=None) -> ChatCompletionChunk:
        return self._template.model_copy(
            update={
                "choices": [ChatChunkChoice(delta=delta, finish_reason=finish_reason)],
                "usage": usage,
            }
        )


def _decode(step, data: bytes):
    try:
        return step(data)
    except SSEDecodeError as e:
        raise InvalidStream(str(e)) from None


async def _read_until(response: httpx.Response, deadline: float) -> AsyncIterator[bytes]:
    """The body's bytes as they arrive, within the request's overall deadline."""
    chunks = response.aiter_bytes()
    while True:
        try:
            async with asyncio.timeout_at(deadline):
                data = await anext(chunks)
        except StopAsyncIteration:
            return
        except (TimeoutError, httpx.TimeoutException):
            raise UpstreamTimeout("generate body not finished in time") from None
        except httpx.HTTPError as e:
            raise TransportError(f"reading generate body: {_describe(e)}") from None
        yield data


async def _read_limited(response: httpx.Response, limit: int) -> bytes:
    body = bytearray()
    async for data in response.aiter_bytes():
        body += data
        if len(body) > limit:
            raise ProtocolError(f"body larger than {limit} bytes")
    return bytes(body)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
