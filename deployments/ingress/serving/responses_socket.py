"""WebSocket mode of `/v1/responses` (docs/api/responses.md#websocket-mode): one connection,
any number of responses one after the other, each started by a `response.create` message and
answered with the same stream events as HTTP's SSE (`Turn.events`, serving/responses.py: one
code path for both transports), unframed, one JSON message per event.

What the socket adds to HTTP:
- it keeps its last completed response (stored or not) in connection-local memory, so a turn
  with that `previous_response_id` continues without the record store: a `store: false` chain
  continues on its own socket and nowhere else (a new socket answers previous_response_not_found);
  older or stored ids are read from the record store as over HTTP;
- a continuation that fails (4xx or 5xx, before or while it streams) forgets the response it
  continued, as the spec requires: a later turn naming it is previous_response_not_found unless
  it was stored;
- turns run in the order they arrive, one at a time (messages sent meanwhile wait); a client
  that leaves mid-turn stops its generation;
- a connection lasts at most an hour: then the error `websocket_connection_limit_reached`, and
  the server closes it.
Authentication is the ingress middleware's, as on the other WebSockets (header or subprotocol).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Optional

from fastapi import WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError

from deployments.ingress.errors import from_exception, validate_body, validation_error
from deployments.ingress.serving.responses import Recent, ServingResponses
from deployments.ingress.state import IngressState
from deployments.protocol.responses import ResponsesRequest
from deployments.protocol.responses_socket import (
    CONNECTION_LIMIT_S,
    connection_limit_reached,
    create_request,
    error_envelope,
)

logger = logging.getLogger("ray.serve")
TIMED_OUT = "\x00timed out"  # the connection's time ran out while waiting for a message


class ResponsesSocket:
    """One WebSocket on /v1/responses: its turns, and the response it may continue from."""

    def __init__(self, websocket: WebSocket, state: IngressState):
        self.ws = websocket
        self.serving = ServingResponses(state)
        self.session_header = websocket.headers.get("x-session-id")
        self.deadline = time.monotonic() + CONNECTION_LIMIT_S
        self.recent: Optional[Recent] = None
        self.inbox: asyncio.Queue[Optional[str]] = asyncio.Queue()  # None: the client left
        self.gone = asyncio.Event()

    async def serve(self) -> None:
        """Turns until the client leaves or the connection's time is up. A reader task takes the
        client's messages as they come: the next turn waits in `inbox` while one runs, and a
        client that leaves mid-turn is seen at once (its turn is cancelled, which stops the
        generation on its replica), not at the next event sent."""
        reader = asyncio.create_task(self.read())
        try:
            while True:
                left = self.deadline - time.monotonic()
                try:
                    text = await asyncio.wait_for(self.inbox.get(), left) if left > 0 else TIMED_OUT
                except TimeoutError:
                    text = TIMED_OUT
                if text is None:  # the client left
                    return
                if text is TIMED_OUT:
                    await self.ws.send_json(error_envelope(connection_limit_reached()))
                    await self.ws.close(1000)
                    return
                if not await self.until_gone(self.turn(text)):
                    return
        finally:
            reader.cancel()

    async def read(self) -> None:
        try:
            while True:
                await self.inbox.put(await self.ws.receive_text())
        except (WebSocketDisconnect, RuntimeError):  # RuntimeError: receiving after a close
            self.gone.set()
            await self.inbox.put(None)

    async def until_gone(self, work) -> bool:
        """`work` run to its end (True), or cancelled when the client leaves first (False)."""
        task = asyncio.create_task(work)
        gone = asyncio.create_task(self.gone.wait())
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                await task
            return False
        task.result()
        return True

    async def turn(self, text: str) -> None:
        previous = None
        try:
            body = create_request(text)
            # Named before the request is checked: a malformed continuation is a failed one too.
            previous = body.get("previous_response_id")
            request = validate_body(ResponsesRequest, body)
            turn, generation = await self.serving.open_turn(request, self.session_header, self.recent)
        except Exception as e:  # nothing began: the spec's error envelope
            error = validation_error(e) if isinstance(e, RequestValidationError) else from_exception(e)
            self.forget(previous)
            await self.ws.send_json(error_envelope(error))
            return
        await self.stream(turn.events(generation))
        if turn.final is not None and turn.final["status"] == "failed":
            self.forget(previous)
        else:
            self.recent = turn.recent() or self.recent

    async def stream(self, events) -> None:
        """The turn's events, each a message; leaving early (the client gone) closes the
        generation, which stops it on its replica."""
        async with contextlib.aclosing(events):
            async for event in events:
                await self.ws.send_json(event)

    def forget(self, response_id: Optional[str]) -> None:
        """A failed continuation evicts the response it continued (the spec's rule)."""
        if response_id is not None and self.recent is not None and self.recent.response_id == response_id:
            self.recent = None
            logger.info("Responses WebSocket: a failed continuation forgot %s", response_id)
