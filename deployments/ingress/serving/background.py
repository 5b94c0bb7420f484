"""Background responses (`background: true`): the POST answers as soon as the model has started
(the prompt prefilled), and a task of the ingress replica that took it generates the rest while
the client polls `GET /v1/responses/{id}` (the output so far, refreshed every `HEARTBEAT_S`)
and may cancel it with `POST /v1/responses/{id}/cancel`, from any replica.

The response is a record of the graph's record store (Control's), written at the version last
read: the runner's progress, its final state and a cancel never overwrite one another. A cancel
writes the response `cancelled` first; the runner stops at once when it runs in the same process,
else at its next heartbeat, when it reads the cancellation (its slot call is cancelled with it,
which aborts the generation). A response still in progress whose runner stopped heartbeating
for `LEASE_S` (its ingress replica died) is failed when read, saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Optional

from deployments.ingress.errors import from_exception
from deployments.ingress.serving.records import edit_record
from deployments.protocol.errors import APIError
from deployments.protocol.responses import ResponseEvents, failure_code, response_not_found
from deployments.records import RESPONSES

logger = logging.getLogger(__name__)

HEARTBEAT_S = 2.0
LEASE_S = 30.0
TERMINAL = frozenset({"completed", "incomplete", "failed", "cancelled"})
OWNER = uuid.uuid4().hex  # this process, as the runner of its background responses
RUNNING: dict[str, asyncio.Task] = {}  # response id -> the task of this process that runs it


class Cancelled(Exception):
    """The record says the response was cancelled (by a request to any replica)."""


def is_background(value: dict[str, Any]) -> bool:
    return "background" in value


def finished(value: dict[str, Any]) -> bool:
    return value["response"]["status"] in TERMINAL


async def edit(records: Any, response_id: str, change: Callable[[dict[str, Any]], Optional[dict]]) -> dict:
    """The stored response's record changed by `change` (None: left as it is), at its version."""
    return await edit_record(records, RESPONSES, response_id, change, lambda: response_not_found(response_id))


class BackgroundRun:
    """One background response: its stream of chunks folded into the response object (the same
    folding as a streamed response's events), its progress written while it runs, its end
    written once, unless it was cancelled."""

    def __init__(self, records: Any, response: dict[str, Any], keep: Callable[[dict[str, Any]], Awaitable[None]]):
        self.records = records
        self.id = response["id"]
        self.events = ResponseEvents(response)
        self.keep = keep  # what a finished response does besides being written (a conversation's turn)

    def record(self, response: dict[str, Any], conversation: list[dict], chain: Optional[str]) -> dict[str, Any]:
        return {"response": response, "input": conversation, "chain": chain, "background": self._beat()}

    @staticmethod
    def _beat() -> dict[str, Any]:
        return {"owner": OWNER, "heartbeat": time.time()}

    def start(self, chunks) -> asyncio.Task:
        task = asyncio.create_task(self.run(chunks))
        RUNNING[self.id] = task
        task.add_done_callback(lambda _: RUNNING.pop(self.id, None))
        return task

    async def run(self, chunks) -> None:
        worker = asyncio.create_task(self._generate(chunks))
        try:
            while True:
                done, _ = await asyncio.wait({worker}, timeout=HEARTBEAT_S)
                if done:
                    break
                await self._progress()
            final = await worker
        except Cancelled:
            worker.cancel()
            return
        except asyncio.CancelledError:  # cancelled in this process: the cancel wrote the record
            worker.cancel()
            raise
        except Exception as e:
            error = from_exception(e)
            logger.warning("Background response %s failed: %s", self.id, error.message)
            final = {"status": "failed", "error": {"code": failure_code(error), "message": error.message}}
            final = {**self.events.response, "output": self.events.output, **final}
        try:
            if await self._finish(final):
                await self.keep(final)
        except Cancelled:
            pass

    async def _generate(self, chunks) -> dict[str, Any]:
        finish_reason, usage = None, None
        async for chunk in chunks:
            self.events.feed(chunk)
            finish_reason, usage = chunk.finish_reason or finish_reason, chunk.usage or usage
        self.events.finish(finish_reason, usage)
        return self.events.response

    async def _progress(self) -> None:
        """The output so far and a heartbeat into the record; `Cancelled` when it says so."""
        snapshot = self.events.progress()

        def change(value: dict[str, Any]) -> dict[str, Any]:
            if finished(value):
                raise Cancelled(self.id)
            return {**value, "response": snapshot, "background": self._beat()}

        try:
            await edit(self.records, self.id, change)
        except (Cancelled, APIError):  # cancelled, or deleted
            raise Cancelled(self.id) from None
        except Exception as e:  # the store away for a moment: the next beat tries again
            logger.warning("Background response %s: progress not written: %s", self.id, e)

    async def _finish(self, final: dict[str, Any]) -> bool:
        """The final state written, unless the response was cancelled meanwhile (False)."""
        written = []

        def change(value: dict[str, Any]) -> Optional[dict[str, Any]]:
            if finished(value):
                return None
            written.append(True)
            return {**value, "response": final, "background": self._beat()}

        try:
            await edit(self.records, self.id, change)
        except APIError:  # deleted while it ran
            return False
        return bool(written)


async def cancel(records: Any, response_id: str) -> dict[str, Any]:
    """Cancel a background response: the record says `cancelled` (with the output so far), and
    its runner stops; a finished one is returned as it is (cancelling is idempotent)."""

    def change(value: dict[str, Any]) -> Optional[dict[str, Any]]:
        if not is_background(value):
            raise APIError(
                400, "Only responses created with background: true can be cancelled", "invalid_request_error", None
            )
        if finished(value):
            return None
        return {**value, "response": {**value["response"], "status": "cancelled"}}

    value = await edit(records, response_id, change)
    task = RUNNING.get(response_id)
    if task is not None:
        task.cancel()
    return value["response"]


async def settled(records: Any, response_id: str, value: dict[str, Any]) -> dict[str, Any]:
    """A stored background response as it stands: one still in progress whose runner stopped
    (no heartbeat for LEASE_S, or this process's task gone) is failed, saying why."""
    if not is_background(value) or finished(value) or not _orphaned(response_id, value["background"]):
        return value

    def change(current: dict[str, Any]) -> Optional[dict[str, Any]]:
        if finished(current) or not _orphaned(response_id, current["background"]):
            return None
        error = {"code": "server_error", "message": "The ingress replica running this background response stopped"}
        return {**current, "response": {**current["response"], "status": "failed", "error": error}}

    return await edit(records, response_id, change)


def _orphaned(response_id: str, background: dict[str, Any]) -> bool:
    if background.get("owner") == OWNER:
        return response_id not in RUNNING
    return background.get("heartbeat", 0) < time.time() - LEASE_S
