"""A synthesis on the TTS slot, as every speech surface opens it (HTTP speech, WebSocket TTS
sessions, the voice agent): the slot's stream of `SpeechChunk`s as float32 samples or PCM16,
and `encoder_step` for the surfaces that encode it.

The slot's first chunk (empty, with the sample rate) is awaited before any byte is sent, so
an unknown voice, a bad reference or an unsupported option still gets its 4xx status.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Optional

import numpy as np

from deployments.audio.encode import StreamEncoder, to_pcm16
from deployments.ingress.clients import SlotStream
from deployments.ingress.state import IngressState
from deployments.protocol.errors import server_error
from deployments.protocol.speech import SpokenWord, SynthesisParams


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

    async def spoken(self) -> AsyncIterator[tuple[np.ndarray, list[SpokenWord]]]:
        """`audio`'s chunks with the words timed in them (asked with `word_timings`)."""
        async for chunk in self._stream.chunks():
            samples = chunk.to_array()
            if samples.size or chunk.words:
                yield samples, chunk.words

    async def pcm(self) -> AsyncIterator[bytes]:
        async for samples in self.audio():
            yield to_pcm16(samples)


def pcm_headers(sample_rate: int) -> dict[str, str]:
    return {
        "X-Audio-Sample-Rate": str(sample_rate),
        "X-Audio-Channels": "1",
        "X-Audio-Bits-Per-Sample": "16",
    }


async def encoder_step(encoder: StreamEncoder, step: Callable[..., bytes], *args) -> bytes:
    """One of the encoder's steps (`feed`, `finish`): a codec's in a thread (a segment's MP3 is
    milliseconds of CPU that other requests' streams would wait on), a copy's in place."""
    return await asyncio.to_thread(step, *args) if encoder.costly else step(*args)
