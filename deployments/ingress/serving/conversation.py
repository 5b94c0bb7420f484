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

With function tools in the session, the LLM may call them: each call is a function_call output
item after the message (if the model also said something). The client runs it and adds a
function_call_output item, then asks for the next response, which answers with the result.

The conversation's items (deployments/protocol/realtime_items.py) are what the LLM is sent,
as the client edits them: retrieved, deleted, placed, and an answer's audio truncated to what
the client played when the user interrupted it.

client: session.update (type realtime), input_audio_buffer.append / commit / clear,
        conversation.item.create (a user or system message, a function_call_output),
        conversation.item.retrieve / delete / truncate, response.create, response.cancel
server: the transcription session's events, conversation.item.added, response.created, and per
        output item: response.output_item.added, then for the message
        response.content_part.added, response.output_audio_transcript.delta (or
        response.output_text.delta for text only), response.output_audio.delta (base64 PCM16,
        24 kHz) and their `.done` events, for a function call
        response.function_call_arguments.delta / .done; response.output_item.done; response.done
        (with the LLM's token counts); conversation.item.retrieved / deleted / truncated
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from fastapi import WebSocket

from deployments.ingress.errors import from_exception
from deployments.ingress.serving.adapters import resolve_model
from deployments.ingress.serving.agent import AgentReply, ServingAgent
from deployments.ingress.serving.asr_sessions import ServingASRSessions
from deployments.ingress.serving.realtime import Connection
from deployments.ingress.state import IngressState
from deployments.protocol.agent import Speech
from deployments.protocol.openai import ToolCall
from deployments.protocol.realtime import RealtimeError, error_event, event, new_id
from deployments.protocol.realtime_conversation import (
    ConversationSession,
    assistant_item,
    function_call_item,
    function_output,
    function_output_item,
    input_message,
    output_audio,
    response_object,
    session_llm,
    user_item,
)
from deployments.protocol.realtime_items import ConversationItems

logger = logging.getLogger(__name__)


async def open_conversation(websocket: WebSocket, state: IngressState, model: Optional[str]):
    """A conversation with the LLM `model` names (`?model=`; the slot's default when absent),
    or None after an error event and a close when that model is not served."""
    try:
        llm_model = await resolve_model(state, "llm", session_llm(model))
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
    """The response in progress: its task, its output items so far, and why it is being
    cancelled. Its message item is opened when the first words arrive (a response that only
    calls tools has none)."""

    id: str
    item_id: str  # the message's
    session: ConversationSession
    task: Optional[asyncio.Task] = None
    reason: Optional[str] = None  # turn_detected | client_cancelled
    closing: bool = False  # the socket is gone: no events
    finishing: bool = False  # its done events are being sent: too late to cancel
    opened: bool = False  # the message item was added
    output: list = field(default_factory=list)  # the finished output items, for response.done
    spoken: list = field(default_factory=list)  # [sentence, ms of audio at its end (None: no audio yet)]

    @property
    def ids(self) -> dict:
        """The fields every delta and done event of its message item carries."""
        return {"response_id": self.id, "item_id": self.item_id, "output_index": 0}

    def part(self, text: str = "") -> dict:
        return {"type": "audio", "transcript": text} if self.session.speaks else {"type": "text", "text": text}


class Conversation(Connection):
    SESSION = ConversationSession

    def __init__(self, websocket: WebSocket, state: IngressState, llm_model: Optional[str]):
        super().__init__(websocket, ServingASRSessions(state))
        self.agent, self.state = ServingAgent(state), state
        self.config = replace(self.config, llm=llm_model)
        self.items = ConversationItems()
        self.response: Optional[Response] = None

    async def open(self, config: ConversationSession) -> None:
        """(Re)start the ASR session, with the LLM a session.update's `model` names checked."""
        if config.llm != self.config.llm:
            try:
                config = replace(config, llm=await resolve_model(self.state, "llm", config.llm))
            except Exception as e:
                error = from_exception(e)
                raise RealtimeError(error.message, "session.model", error.code or "model_not_found") from None
        await super().open(config)

    async def handle(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "response.create":
            await self.respond(message.get("response"))
        elif kind == "response.cancel":
            if not await self.cancel_response("client_cancelled"):
                raise RealtimeError("There is no response in progress to cancel", None, "response_cancel_not_active")
        elif kind == "conversation.item.create":
            await self.add_item(message.get("item"), message.get("previous_item_id"))
        elif kind == "conversation.item.retrieve":
            await self.send(event("conversation.item.retrieved", item=self.items.get(message.get("item_id"))))
        elif kind == "conversation.item.delete":
            await self.delete_item(message.get("item_id"))
        elif kind == "conversation.item.truncate":
            await self.truncate_item(message)
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

    async def add_item(self, item: Any, previous_item_id: Any = None) -> None:
        """A conversation.item.create: a user or system message, or the output of a function
        call, after `previous_item_id` (None: last; "root": first)."""
        given = item.get("id") if isinstance(item, dict) else None
        item_id = given if isinstance(given, str) and given else new_id("item")
        if previous_item_id is not None and not isinstance(previous_item_id, str):
            raise RealtimeError('previous_item_id must be an item id or "root"', "previous_item_id")
        if not isinstance(item, dict) or item.get("type") != "function_call_output":
            role, text = input_message(item)
            await self._added(user_item(item_id, text, audio=False, role=role), previous_item_id)
            return
        call_id, output = function_output(item)
        if call_id not in self.items.open_calls():
            raise RealtimeError(f"No function call with call_id '{call_id}' is waiting for its output", "item.call_id")
        await self._added(function_output_item(item_id, call_id, output), previous_item_id)

    async def add_user(self, item_id: str, text: str, audio: bool) -> None:
        await self._added(user_item(item_id, text, audio))

    async def _added(self, item: dict, previous_item_id: Optional[str] = None) -> None:
        previous = self.items.add(item, previous_item_id)
        await self.send(event("conversation.item.added", previous_item_id=previous, item=item))

    async def delete_item(self, item_id: Any) -> None:
        self._not_in_progress(item_id)
        self.items.delete(item_id)
        await self.send(event("conversation.item.deleted", item_id=item_id))

    async def truncate_item(self, message: dict) -> None:
        """The client played an assistant message's audio up to `audio_end_ms` (then the user
        interrupted): the conversation keeps what was heard."""
        item_id, index, end = message.get("item_id"), message.get("content_index"), message.get("audio_end_ms")
        self._not_in_progress(item_id)
        self.items.truncate(item_id, index, end)
        await self.send(event("conversation.item.truncated", item_id=item_id, content_index=index, audio_end_ms=end))

    def _not_in_progress(self, item_id: Any) -> None:
        if self.response is not None and item_id in {self.response.item_id, *(i["id"] for i in self.response.output)}:
            raise RealtimeError("The item belongs to the response in progress: cancel it first", "item_id")

    async def respond(self, params: Any) -> None:
        if self.response is not None:
            raise RealtimeError(
                "A response is in progress: cancel it first", None, "conversation_already_has_active_response"
            )
        session = self.config.for_response(params)
        if not self.items.answerable():
            raise RealtimeError(
                "The conversation has no user message or function output to answer", None, "no_user_message"
            )
        response = self.response = Response(new_id("resp"), new_id("item"), session)
        await self.send(event("response.created", response=response_object(response.id, session, "in_progress", [])))
        response.task = asyncio.create_task(self._run(response))

    async def _open_message(self, response: Response) -> None:
        """The response's message item, added before its first words."""
        response.opened = True
        item = assistant_item(response.item_id, "", response.session.speaks, "in_progress")
        await self.send(event("response.output_item.added", response_id=response.id, output_index=0, item=item))
        await self._added(item)
        await self.send(event("response.content_part.added", content_index=0, part=response.part(), **response.ids))

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

    async def _run(self, response: Response) -> None:
        session, said, calls = response.session, [], []
        status, details = "completed", None
        speech = Speech(voice=session.voice, speed=session.speed) if session.speaks else None
        reply = None
        try:
            reply = await self._reply(session, speech)
            async for piece in reply.events():
                await self._output(piece, reply.sample_rate, said, response)
            calls = reply.tool_calls
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
        await self._end(response, said, calls, status, details, reply and reply.usage)

    async def _reply(self, session: ConversationSession, speech: Optional[Speech]) -> AgentReply:
        """The agent's reply to the conversation; with `truncation: auto`, a conversation the
        LLM's context cannot hold is sent again without its oldest turn until it fits (the LLM
        slot refuses an overlong prompt before it generates, so each try is one tokenization)."""
        first = 0
        while True:
            try:
                return await self.agent.reply(session.chat_body(self.items, first), speech)
            except Exception as e:
                full = from_exception(e).code == "context_length_exceeded"
                if not full or session.truncation != "auto" or first + 1 >= self.items.turns():
                    raise
                first += 1
                logger.info("Realtime %s: the conversation is past the LLM's context; left out turn %d", self.id, first)

    async def _failed(self, e: Exception) -> tuple[str, dict]:
        """An error event for a slot's failure; the response ends `failed`."""
        error = from_exception(e)
        await self.send(error_event(error.message, error.param, error.code or "response_failed"))
        return "failed", {"type": "failed", "error": {"type": error.type, "code": error.code, "message": error.message}}

    async def _end(
        self, response: Response, said: list, calls: list[ToolCall], status: str, details: Optional[dict], usage=None
    ) -> None:
        response.finishing = True
        try:
            await self._finish(response, " ".join(said), status, details, calls, usage)
        finally:
            self.response = None

    async def _output(self, piece: dict, rate: Optional[int], said: list, response: Response) -> None:
        """One pipeline event as the Realtime delta event it stands for."""
        if not response.opened:
            await self._open_message(response)
        if piece["type"] == "text":
            delta = (" " if said else "") + piece["text"]
            said.append(piece["text"])
            response.spoken.append([piece["text"], None])  # not heard before its audio
            speaks = response.session.speaks
            kind = "response.output_audio_transcript.delta" if speaks else "response.output_text.delta"
            await self.send(event(kind, content_index=0, delta=delta, **response.ids))
        else:
            raw = base64.b64decode(piece["delta"])
            pcm = output_audio(raw, rate, response.session.output_format)
            before = max((ms for _, ms in response.spoken if ms is not None), default=0.0)
            response.spoken[-1][1] = (response.spoken[-1][1] or before) + len(raw) / 2 / rate * 1000
            delta = base64.b64encode(pcm).decode("ascii")
            await self.send(event("response.output_audio.delta", content_index=0, delta=delta, **response.ids))

    async def _finish(
        self, response: Response, text: str, status: str, details: Optional[dict], calls=(), usage=None
    ) -> None:
        if response.opened:
            await self._close_message(response, text, "completed" if status == "completed" else "incomplete")
        for call in calls:
            await self._function_call(response, call)
        done = response_object(response.id, response.session, status, response.output, details, usage)
        await self.send(event("response.done", response=done))

    async def _close_message(self, response: Response, text: str, state: str) -> None:
        ids = response.ids
        if response.session.speaks:
            await self.send(event("response.output_audio.done", content_index=0, **ids))
            await self.send(event("response.output_audio_transcript.done", content_index=0, transcript=text, **ids))
        else:
            await self.send(event("response.output_text.done", content_index=0, text=text, **ids))
        await self.send(event("response.content_part.done", content_index=0, part=response.part(text), **ids))
        item = assistant_item(response.item_id, text, response.session.speaks, state)
        self.items.update(item)
        if response.session.speaks:
            self.items.spoken(item["id"], [(t, ms) for t, ms in response.spoken])
        await self.send(event("response.output_item.done", response_id=response.id, output_index=0, item=item))
        response.output.append(item)

    async def _function_call(self, response: Response, call: ToolCall) -> None:
        """One call the LLM made, as an output item whose arguments arrive whole (the LLM slot
        parses a call once its markup is closed)."""
        index, item_id = len(response.output), new_id("item")
        where = {"response_id": response.id, "output_index": index}
        announced = function_call_item(item_id, call, "in_progress", "")
        await self.send(event("response.output_item.added", **where, item=announced))
        await self._added(announced)
        ids = {**where, "item_id": item_id, "call_id": call.id}
        arguments = call.function.arguments
        await self.send(event("response.function_call_arguments.delta", **ids, delta=arguments))
        done = event("response.function_call_arguments.done", **ids, name=call.function.name, arguments=arguments)
        await self.send(done)
        item = function_call_item(item_id, call, "completed")
        self.items.update(item)
        await self.send(event("response.output_item.done", **where, item=item))
        response.output.append(item)
