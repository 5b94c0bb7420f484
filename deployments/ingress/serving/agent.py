"""The voice agent across the LLM and TTS slots: POST /v1/agent/stream (MiniInfer's route) and
the Realtime conversation's responses (serving/conversation.py) both answer through
`ServingAgent.reply`.

Before any byte is sent, the LLM stream is opened up to its first chunk and the TTS model and
voice are checked by opening an empty synthesis (it validates like a real one and names the
sample rate), both at once: a bad model or voice is a 4xx with its proper status, not an event.
Then `speak_while_writing` pipelines them (deployments/agent/pipeline.py) into events: per
sentence `text` then `audio` (base64 s16le at the TTS rate). The SSE route frames them after a
`meta` event and ends with `[DONE]`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Optional

from fastapi.responses import StreamingResponse

from deployments.agent.pipeline import Synthesize, speak_while_writing
from deployments.agent.sentences import sentences_of
from deployments.ingress.clients import SlotStream
from deployments.ingress.errors import validate_body
from deployments.ingress.responses import sse_response
from deployments.ingress.serving.adapters import resolve_model
from deployments.ingress.serving.speech_stream import SpeechStream, pcm_headers
from deployments.ingress.state import IngressState
from deployments.protocol.agent import AgentRequest, Speech
from deployments.protocol.openai import ChatCompletionRequest, ToolCall, UsageInfo


async def _silent(sentence: str) -> AsyncGenerator[bytes, None]:
    return
    yield  # an async generator with no audio: a text-only reply


@dataclass
class AgentReply:
    """An answer whose slots are checked and streaming: `events()` runs the pipeline once; the
    tool calls the LLM made and its token counts are in `tool_calls` and `usage` once it has."""

    model: str
    sample_rate: Optional[int]  # None: a text-only reply (no TTS)
    _llm: SlotStream
    _speak: Synthesize
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Optional[UsageInfo] = None

    def events(self) -> AsyncIterator[dict]:
        return speak_while_writing(sentences_of(self._answer_text()), self._speak)

    async def _answer_text(self) -> AsyncGenerator[str, None]:
        """The LLM's answer text as it streams (reasoning and tool calls are not spoken)."""
        async with contextlib.aclosing(self._llm.chunks()) as chunks:
            async for chunk in chunks:
                self.tool_calls.extend(chunk.tool_calls)
                self.usage = chunk.usage or self.usage
                if chunk.content:
                    yield chunk.content


class ServingAgent:
    def __init__(self, state: IngressState):
        self.state = state

    async def stream(self, request: AgentRequest) -> StreamingResponse:
        """SSE: `meta`, the reply's events, then `[DONE]`."""
        reply = await self.reply(request.chat_body(), request.speech())
        meta = {
            "type": "meta",
            "model": reply.model,
            **({"tts_model": request.tts_model} if request.tts_model else {}),  # else the TTS slot's default
            "voice": request.voice,
            "sample_rate": reply.sample_rate,
            "format": "pcm_s16le",
        }

        async def events() -> AsyncIterator[dict]:
            yield meta
            async for event in reply.events():
                yield event

        response = sse_response(events())
        response.headers.update(pcm_headers(reply.sample_rate))
        return response

    async def reply(self, body: dict[str, Any], speech: Optional[Speech]) -> AgentReply:
        """The answer to the chat request `body`, spoken as `speech` says (None: the LLM's text
        only), both slots checked."""
        chat = validate_body(ChatCompletionRequest, body)
        llm_model = await resolve_model(self.state, "llm", chat.model)
        if speech is None:
            llm = await self.state.slot("llm").stream("chat", chat, model=llm_model)
            return AgentReply((llm.first.model if llm.first else None) or llm_model, None, llm, _silent)
        tts_model = self.state.catalog.resolve("tts", speech.tts_model)
        llm, probe = await self._open(chat, llm_model, speech, tts_model)

        async def synthesize(sentence: str) -> AsyncGenerator[bytes, None]:
            spoken = await SpeechStream.open(self.state, speech.synthesis(sentence), tts_model)
            async with contextlib.aclosing(spoken.pcm()) as pcm:
                async for data in pcm:
                    yield data

        return AgentReply((llm.first.model if llm.first else None) or llm_model, probe.sample_rate, llm, synthesize)

    async def _open(
        self, chat: ChatCompletionRequest, llm_model: str, speech: Speech, tts_model: str
    ) -> tuple[SlotStream, SpeechStream]:
        """Both slots checked at once; if either fails, the other's call is cancelled."""
        opening = [
            asyncio.ensure_future(self.state.slot("llm").stream("chat", chat, model=llm_model)),
            asyncio.ensure_future(SpeechStream.open(self.state, speech.synthesis(""), tts_model)),
        ]
        try:
            llm, probe = await asyncio.gather(*opening, return_exceptions=True)
        except asyncio.CancelledError:  # a Realtime response cancelled while it opens
            for task in opening:
                if task.done() and not task.cancelled() and task.exception() is None:
                    task.result().cancel()
            raise
        if not isinstance(probe, BaseException):
            probe.cancel()  # it only checked the model and voice: an empty text has no audio
        elif not isinstance(llm, BaseException):
            llm.cancel()
        for result in (llm, probe):
            if isinstance(result, BaseException):
                raise result
        return llm, probe
