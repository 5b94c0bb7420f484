"""How the ingress calls the deployments behind it: one client per deployment handle.

A client caches its configured handles (each `.options()` call makes a new handle; Ray Serve
LLM caches them the same way), sets the Serve multiplexed model id in one place, and maps every
exception that crosses a handle onto an OpenAI-shaped `APIError` once, so routers never spell
`.options(...)` or `try/except` themselves. Tests give the ingress objects with the same
`call`/`stream` methods instead (tests/ingress/fakes.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Optional

from deployments.ingress.errors import from_exception
from deployments.protocol.generation import GenerationChunk
from deployments.slot_types import Slot

MAX_CACHED_HANDLES = 64  # model ids come from the allow-list (and a models dir): few in practice


class SlotStream:
    """A deployment's response stream, opened and checked up to its first chunk.

    The first chunk is awaited before any byte goes to the client, so a request that fails
    early (unknown model, prompt too long, model cannot load) still gets its proper 4xx/5xx
    status and error body; after that, errors can only be reported inside the stream.
    """

    def __init__(self, response_gen: Any, first: Any):
        self._gen = response_gen
        self.first = first

    @classmethod
    async def start(cls, gen: Any) -> SlotStream:
        try:
            first = await gen.__anext__()
        except StopAsyncIteration:
            first = None
        except asyncio.CancelledError:
            # The route's timeout or the client leaving: it stays a cancellation (RouteTimeout
            # answers 504), never a 500 "CancelledError"; the call in the deployment stops too.
            gen.cancel()
            raise
        except BaseException as e:
            gen.cancel()
            raise from_exception(e) from None
        return cls(gen, first)

    async def chunks(self) -> AsyncIterator[Any]:
        """All chunks, the first included. Leaving early cancels the call in the deployment."""
        finished = False
        try:
            if self.first is not None:
                yield self.first
                try:
                    async for chunk in self._gen:
                        yield chunk
                except Exception as e:
                    raise from_exception(e) from None
            finished = True
        finally:
            if not finished:
                self._gen.cancel()

    def cancel(self) -> None:
        """Stop the call in the deployment without reading it (a stream opened only to check)."""
        self._gen.cancel()

    async def collect(self) -> GenerationChunk:
        """An LLM stream's chunks merged into one (non-streaming responses)."""
        total = GenerationChunk()
        async for chunk in self.chunks():
            total = total.merge(chunk)
        return total


class DeploymentClient:
    """A deployment's handle: `await call("method", ...)`, `await stream("method", ...)`."""

    def __init__(self, handle: Any):
        self._handle = handle
        self._configured: dict[tuple[str, bool], Any] = {}

    def _options(self, model: Optional[str], stream: bool) -> Any:
        key = (model or "", stream)  # "": no model named, any replica (the slot's default)
        handle = self._configured.get(key)
        if handle is None:
            if len(self._configured) >= MAX_CACHED_HANDLES:
                self._configured.clear()
            handle = self._handle.options(multiplexed_model_id=key[0], stream=stream)
            self._configured[key] = handle
        return handle

    def _for_request(self, model: Optional[str], stream: bool, session: Optional[str]) -> Any:
        handle = self._options(model, stream)
        # A session key (per request, so never cached) lets the deployment's request router
        # keep a conversation on one replica (deployments/routing/router.py).
        return handle.options(session_id=session) if session else handle

    async def call(self, method: str, *args: Any, model: Optional[str] = None, session: Optional[str] = None) -> Any:
        """One answer; the deployment's error (or Ray's) as an APIError."""
        try:
            return await getattr(self._for_request(model, False, session), method).remote(*args)
        except Exception as e:
            raise from_exception(e) from None

    async def stream(
        self, method: str, *args: Any, model: Optional[str] = None, session: Optional[str] = None
    ) -> SlotStream:
        """A streaming call, opened up to its first chunk (errors before it keep their status)."""
        return await SlotStream.start(getattr(self._for_request(model, True, session), method).remote(*args))


class SlotClient(DeploymentClient):
    """A model slot's deployment, with the registry entry that describes it."""

    def __init__(self, slot: Slot, handle: Any):
        super().__init__(handle)
        self.slot = slot
