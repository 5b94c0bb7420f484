"""POST /v1/agent/stream: the voice agent across the LLM and TTS slots (MiniInfer's route).

Before any byte is sent, the LLM stream is opened up to its first chunk and the TTS model and
voice are checked by opening an empty synthesis (it validates like a real one and names the
sample rate), both at once: a bad model or voice is a 4xx with its proper status, not an event.
Then `speak_while_writing` pipelines them (deployments/agent/pipeline.py) into SSE events:
`meta`, per sentence `text` then `audio` (base64 s16le at the TTS rate), then `[DONE]`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator

from fastapi.responses import StreamingResponse

from deployments.agent.pipeline import speak_while_writing
from deployments.agent.sentences import sentences_of
from deployments.ingress.clients import SlotStream
from deployments.ingress.errors import validate_body
from deployments.ingress.responses import sse_response
from deployments.ingress.speech import SpeechStream, pcm_headers
from deployments.ingress.state import IngressState
from deployments.protocol.agent import AgentRequest
from deployments.protocol.openai import ChatCompletionRequest


async def answer_text(stream: SlotStream) -> AsyncGenerator[str, None]:
    """The LLM's answer text as it streams (reasoning and tool calls are not spoken)."""
    async with contextlib.aclosing(stream.chunks()) as chunks:
        async for chunk in chunks:
            if chunk.content:
                yield chunk.content


class ServingAgent:
    def __init__(self, state: IngressState):
        self.state = state

    async def stream(self, request: AgentRequest) -> StreamingResponse:
        chat = validate_body(ChatCompletionRequest, request.chat_body())
        llm_model = self.state.catalog.resolve("llm", chat.model)
        tts_model = self.state.catalog.resolve("tts", request.tts_model)
        llm, probe = await self._open(chat, llm_model, request, tts_model)

        async def speak(sentence: str) -> AsyncGenerator[bytes, None]:
            speech = await SpeechStream.open(self.state, request.synthesis(sentence), tts_model)
            async with contextlib.aclosing(speech.pcm()) as pcm:
                async for data in pcm:
                    yield data

        meta = {
            "type": "meta",
            "model": (llm.first.model if llm.first else None) or llm_model,
            **({"tts_model": tts_model} if tts_model else {}),  # else the TTS slot's current default
            "voice": request.voice,
            "sample_rate": probe.sample_rate,
            "format": "pcm_s16le",
        }

        async def events() -> AsyncIterator[dict]:
            yield meta
            async for event in speak_while_writing(sentences_of(answer_text(llm)), speak):
                yield event

        response = sse_response(events())
        response.headers.update(pcm_headers(probe.sample_rate))
        return response

    async def _open(
        self, chat: ChatCompletionRequest, llm_model: str, request: AgentRequest, tts_model: str
    ) -> tuple[SlotStream, SpeechStream]:
        """Both slots checked at once; if either fails, the other's call is cancelled."""
        llm, probe = await asyncio.gather(
            self.state.slot("llm").stream("chat", chat, model=llm_model),
            SpeechStream.open(self.state, request.synthesis(""), tts_model),
            return_exceptions=True,
        )
        if not isinstance(probe, BaseException):
            probe.cancel()  # it only checked the model and voice: an empty text has no audio
        elif not isinstance(llm, BaseException):
            llm.cancel()
        for result in (llm, probe):
            if isinstance(result, BaseException):
                raise result
        return llm, probe
