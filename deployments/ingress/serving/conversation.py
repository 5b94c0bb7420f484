"""OpenAI's Realtime conversation on `/v1/realtime` (no intent): speech in, speech out, across
the ASR, LLM and TTS slots (docs/api/agent.md).

The input side is the transcription session's (serving/realtime.py): appends feed an ASR
streaming session whose server VAD ends each utterance. A transcript joins the conversation as
a user message and, with server VAD, starts a response; `response.create` starts one by hand.
A response is the agent's reply (serving/agent.py: LLM sentences spoken by the TTS slot while
the LLM writes the next), run on its own task so the socket keeps reading: `response.cancel`,
and speech starting while it plays (barge-in), cancel that task, which closes the LLM stream and
the synthesis in progress. Every response ends with `response.done` (completed, cancelled or
failed), and what it said joins the conversation as the assistant's turn.

client: session.update (type realtime), input_audio_buffer.append / commit / clear,
        conversation.item.create (a user text message), response.create, response.cancel
server: the transcription session's events, conversation.item.added, response.created,
        response.output_item.added, response.content_part.added,
        response.output_audio_transcript.delta (or response.output_text.delta for text only),
        response.output_audio.delta (base64 PCM16, 24 kHz), their `.done` events, response.done
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from dataclasses import dataclass
from typing import Any, Optional

from fastapi import WebSocket

from deployments.ingress.errors import from_exception
from deployments.ingress.serving.agent import ServingAgent
from deployments.ingress.serving.asr_sessions import ServingASRSessions
from deployments.ingress.serving.realtime import Connection
from deployments.ingress.state import IngressState
from deployments.protocol.agent import AgentRequest
from deployments.protocol.realtime import RealtimeError, error_event, event, new_id
from deployments.protocol.realtime_conversation import (
    ConversationSession,
    assistant_item,
    output_pcm,
    response_object,
    user_item,
    user_text,
)


async def open_conversation(websocket: WebSocket, state: IngressState, model: Optional[str]):
    """A conversation with the LLM `model` names (`?model=`; the slot's default when absent),
    or None after an error event and a close when that model is not served."""
    try:
        llm_model = state.catalog.resolve("llm", model)
    except Exception as e:
        error = from_exception(e)
        await websocket.send_json(error_event(error.message, "model", error.code or "model_not_found"))
        await websocket.close(1008)
        return None
    return Conversation(websocket, state, llm_model)


def _cancelled(response: Response) -> tuple[str, dict]:
    """The response's cancel was handled: its task goes on to send the done events."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        task.uncancel()
    return "cancelled", {"type": "cancelled", "reason": response.reason}


@dataclass
class Response:
    """The response in progress: its task, and why it is being cancelled."""

    id: str
    item_id: str
    session: ConversationSession
    task: Optional[asyncio.Task] = None
    reason: Optional[str] = None  # turn_detected | client_cancelled
    closing: bool = False  # the socket is gone: no events
    finishing: bool = False  # its done events are being sent: too late to cancel

    @property
    def ids(self) -> dict:
        """The fields every delta and done event of its one output item carries."""
        return {"response_id": self.id, "item_id": self.item_id, "output_index": 0}

    def part(self, text: str = "") -> dict:
        return {"type": "audio", "transcript": text} if self.session.speaks else {"type": "text", "text": text}


class Conversation(Connection):
    SESSION = ConversationSession

    def __init__(self, websocket: WebSocket, state: IngressState, llm_model: Optional[str]):
        super().__init__(websocket, ServingASRSessions(state))
        self.agent = ServingAgent(state)
        self.llm_model = llm_model
        self.history: list[dict] = []  # the conversation as chat messages, oldest first
        self.last_item: Optional[str] = None  # the conversation's newest item
        self.response: Optional[Response] = None

    async def handle(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "response.create":
            await self.respond(message.get("response"))
        elif kind == "response.cancel":
            if not await self.cancel_response("client_cancelled"):
                raise RealtimeError("There is no response in progress to cancel", None, "response_cancel_not_active")
        elif kind == "conversation.item.create":
            text = user_text(message.get("item"))
            given = message["item"].get("id")
            await self.add_user(given if isinstance(given, str) and given else new_id("item"), text, audio=False)
        else:
            await super().handle(message)

    async def speech_started(self) -> None:
        turn = self.config.turn_detection
        if turn is not None and turn.interrupt_response:
            await self.cancel_response("turn_detected")  # barge-in

    async def completed(self, utterance: dict) -> None:
        item = self.item_id()
        await super().completed(utterance)
        text = utterance["text"].strip()
        if not text:
            return  # nothing was said: nothing to answer
        await self.add_user(item, text, audio=True)
        turn = self.config.turn_detection
        if turn is not None and turn.create_response and self.response is None:
            await self.respond(None)

    async def add_user(self, item_id: str, text: str, audio: bool) -> None:
        self.history.append({"role": "user", "content": text})
        previous, self.last_item = self.last_item, item_id
        added = event("conversation.item.added", previous_item_id=previous, item=user_item(item_id, text, audio))
        await self.send(added)

    async def respond(self, params: Any) -> None:
        if self.response is not None:
            raise RealtimeError(
                "A response is in progress: cancel it first", None, "conversation_already_has_active_response"
            )
        session = self.config.for_response(params)
        if not self.history or self.history[-1]["role"] != "user":
            raise RealtimeError("The conversation has no user message to answer", None, "no_user_message")
        response = self.response = Response(new_id("resp"), new_id("item"), session)
        await self.send(event("response.created", response=response_object(response.id, session, "in_progress", [])))
        item = assistant_item(response.item_id, "", session.speaks, "in_progress")
        await self.send(event("response.output_item.added", response_id=response.id, output_index=0, item=item))
        previous, self.last_item = self.last_item, response.item_id
        await self.send(event("conversation.item.added", previous_item_id=previous, item=item))
        await self.send(event("response.content_part.added", content_index=0, part=response.part(), **response.ids))
        response.task = asyncio.create_task(self._run(response))

    async def cancel_response(self, reason: str) -> bool:
        """Cancel the response in progress (its response.done is sent before this returns)."""
        response = self.response
        if response is None or response.task is None:
            return False
        if not response.finishing:
            response.reason = reason
            response.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await response.task
        if self.response is response:  # cancelled before its task ran a line: nothing was said
            try:
                await self._finish(response, "", "cancelled", {"type": "cancelled", "reason": reason})
            finally:
                self.response = None
        return True

    async def close(self) -> None:
        if self.response is not None and self.response.task is not None:
            self.response.closing = True
            self.response.task.cancel()
            with contextlib.suppress(BaseException):
                await self.response.task
        await super().close()

    def request(self, session: ConversationSession) -> AgentRequest:
        """The agent's request for the conversation so far: its last user message answered."""
        return AgentRequest(
            input=self.history[-1]["content"],
            system=session.instructions,
            messages=self.history[:-1],
            model=self.llm_model,
            voice=session.voice,
            speed=session.speed,
            max_tokens=session.max_output_tokens,
        )

    async def _run(self, response: Response) -> None:
        session, said = response.session, []
        status, details = "completed", None
        try:
            reply = await self.agent.reply(self.request(session), speak=session.speaks)
            async for piece in reply.events():
                await self._output(piece, reply.sample_rate, said, response)
        except asyncio.CancelledError:
            if response.closing or response.reason is None:
                raise
            status, details = _cancelled(response)
        except Exception as e:
            if response.closing:
                return
            if response.reason is not None:  # a Ray handle turned the cancel into its own error
                status, details = _cancelled(response)
            else:
                status, details = await self._failed(e)
        await self._end(response, said, status, details)

    async def _failed(self, e: Exception) -> tuple[str, dict]:
        """An error event for a slot's failure; the response ends `failed`."""
        error = from_exception(e)
        await self.send(error_event(error.message, error.param, error.code or "response_failed"))
        return "failed", {"type": "failed", "error": {"type": error.type, "code": error.code, "message": error.message}}

    async def _end(self, response: Response, said: list, status: str, details: Optional[dict]) -> None:
        response.finishing = True
        text = " ".join(said)
        if text:
            self.history.append({"role": "assistant", "content": text})
        try:
            await self._finish(response, text, status, details)
        finally:
            self.response = None

    async def _output(self, piece: dict, rate: Optional[int], said: list, response: Response) -> None:
        """One pipeline event as the Realtime delta event it stands for."""
        if piece["type"] == "text":
            delta = (" " if said else "") + piece["text"]
            said.append(piece["text"])
            speaks = response.session.speaks
            kind = "response.output_audio_transcript.delta" if speaks else "response.output_text.delta"
            await self.send(event(kind, content_index=0, delta=delta, **response.ids))
        else:
            pcm = output_pcm(base64.b64decode(piece["delta"]), rate)
            delta = base64.b64encode(pcm).decode("ascii")
            await self.send(event("response.output_audio.delta", content_index=0, delta=delta, **response.ids))

    async def _finish(self, response: Response, text: str, status: str, details: Optional[dict]) -> None:
        ids = response.ids
        if response.session.speaks:
            await self.send(event("response.output_audio.done", content_index=0, **ids))
            await self.send(event("response.output_audio_transcript.done", content_index=0, transcript=text, **ids))
        else:
            await self.send(event("response.output_text.done", content_index=0, text=text, **ids))
        await self.send(event("response.content_part.done", content_index=0, part=response.part(text), **ids))
        state = "completed" if status == "completed" else "incomplete"
        item = assistant_item(response.item_id, text, response.session.speaks, state)
        await self.send(event("response.output_item.done", response_id=response.id, output_index=0, item=item))
        done = response_object(response.id, response.session, status, [item], details)
        await self.send(event("response.done", response=done))
