"""What the speech routes share (HTTP and WebSocket): calling the TTS slot through its handle
and turning its stream of `SpeechChunk`s into audio bytes, SSE events or WebSocket frames.

The slot's first chunk (empty, with the sample rate) is awaited before any byte is sent, so
an unknown voice, a bad reference or an unsupported option still gets its 4xx status.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from typing import Optional

import numpy as np
from fastapi.responses import Response, StreamingResponse

from deployments.audio.encode import MEDIA_TYPES, StreamEncoder, to_pcm16
from deployments.ingress.clients import SlotStream
from deployments.ingress.errors import from_exception
from deployments.ingress.responses import sse_response
from deployments.ingress.state import IngressState
from deployments.protocol.errors import server_error
from deployments.protocol.speech import SynthesisParams

logger = logging.getLogger("ray.serve")


class SpeechStream:
    """A synthesis opened on the TTS slot and checked up to its opening chunk."""

    def __init__(self, stream: SlotStream):
        self._stream = stream
        self.sample_rate: int = stream.first.sample_rate

    @classmethod
    async def open(cls, state: IngressState, params: SynthesisParams, model: Optional[str]) -> SpeechStream:
        stream = await state.slot("tts").stream("synthesize", params, model=model)
        if stream.first is None:
            raise server_error("The TTS slot ended the synthesis without a response")
        return cls(stream)

    def cancel(self) -> None:
        self._stream.cancel()

    async def audio(self) -> AsyncIterator[np.ndarray]:
        """float32 mono chunks as the slot generates them; leaving early stops the synthesis."""
        async for chunk in self._stream.chunks():
            samples = chunk.to_array()
            if samples.size:
                yield samples

    async def pcm(self) -> AsyncIterator[bytes]:
        async for samples in self.audio():
            yield to_pcm16(samples)


def pcm_headers(sample_rate: int) -> dict[str, str]:
    return {
        "X-Audio-Sample-Rate": str(sample_rate),
        "X-Audio-Channels": "1",
        "X-Audio-Bits-Per-Sample": "16",
    }


async def audio_response(speech: SpeechStream, fmt: str) -> Response:
    """The audio as bytes in `fmt`: streamed chunk by chunk for pcm/wav, whole file otherwise."""
    encoder = StreamEncoder(fmt, speech.sample_rate)
    headers = pcm_headers(speech.sample_rate)
    if not encoder.streaming:
        try:
            async for samples in speech.audio():
                encoder.feed(samples)
            data = await asyncio.to_thread(encoder.finish)
        except Exception as e:
            raise from_exception(e) from None
        return Response(data, media_type=MEDIA_TYPES[fmt], headers=headers)

    async def body() -> AsyncIterator[bytes]:
        try:
            async for samples in speech.audio():
                yield encoder.feed(samples)
        except Exception as e:  # the status is sent: the stream just ends (logged)
            logger.warning("Speech stream failed after its headers were sent: %s", from_exception(e).message)
        tail = encoder.finish()
        if tail:
            yield tail

    return StreamingResponse(body(), media_type=MEDIA_TYPES[fmt], headers=headers)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def miniinfer_sse(speech: SpeechStream) -> StreamingResponse:
    """MiniInfer: `data: {"delta": "<base64 s16le>"}` per chunk, then `data: [DONE]`."""

    async def events() -> AsyncIterator[dict]:
        async for pcm in speech.pcm():
            yield {"delta": _b64(pcm)}

    response = sse_response(events())
    response.headers.update(pcm_headers(speech.sample_rate))
    return response


def openai_sse(speech: SpeechStream) -> StreamingResponse:
    """OpenAI `stream_format: "sse"`: `speech.audio.delta` events with base64 s16le, then one
    `speech.audio.done` (no [DONE] line: OpenAI's speech stream has none)."""

    async def events() -> AsyncIterator[dict]:
        samples = 0
        async for pcm in speech.pcm():
            samples += len(pcm) // 2
            yield {"type": "speech.audio.delta", "audio": _b64(pcm)}
        # Token counts do not exist for this model family: reported as 0, with the real duration.
        usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        yield {"type": "speech.audio.done", "usage": usage, "audio_seconds": samples / speech.sample_rate}

    response = sse_response(events(), end=b"")
    response.headers.update(pcm_headers(speech.sample_rate))
    return response
