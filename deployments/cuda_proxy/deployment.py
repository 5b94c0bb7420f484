"""The CUDA proxy as a Ray Serve deployment: a thin adapter from Serve to `ShimClient`.

Bound by the graph only when an OMINIX_V0_* route is configured. It holds no model and does
only network I/O, so it reserves almost no CPU and takes many requests at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ray import serve

from deployments.cuda_proxy.client import ShimClient
from deployments.cuda_proxy.config import CudaRoute
from deployments.cuda_proxy.protocol import CudaChatRequest
from deployments.protocol.openai import ChatCompletionChunk, ChatCompletionResponse
from deployments.resources import reserve


@serve.deployment(name="CudaProxy", max_ongoing_requests=256, ray_actor_options=reserve(0.05, 256))
class CudaProxy:
    def __init__(self, route: CudaRoute):
        self.client = ShimClient(route)

    async def readiness(self) -> dict:
        return await self.client.readiness()

    async def complete(self, request: CudaChatRequest) -> ChatCompletionResponse:
        return await self.client.complete(request)

    async def stream(self, request: CudaChatRequest) -> AsyncIterator[ChatCompletionChunk]:
        async for chunk in self.client.stream(request):
            yield chunk

    async def __del__(self):
        await self.client.aclose()
