"""Kokoro-FastAPI's captioned speech (POST /dev/captioned_speech): the audio with the words it
speaks and when, for subtitles, karaoke and lip sync.

`stream: false` answers one JSON object: `{"audio": <base64 file>, "audio_format": <media type>,
"timestamps": [{"word", "start_time", "end_time"}]}`. `stream: true` (the default, as in
Kokoro-FastAPI) sends one such object per line as the audio is made: each carries the next bytes
of one encoded file (joined, they are the file) and the words timed in them. Words come from
Kokoro's English G2P and duration predictor on the TTS slot (deployments/tts/model_hooks.py); any
other model or language is a 400 naming `return_timestamps`.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Optional

import numpy as np
from fastapi.responses import JSONResponse, Response, StreamingResponse

from deployments.audio.encode import MEDIA_TYPES, StreamEncoder, encode
from deployments.ingress.errors import from_exception
from deployments.ingress.serving.keep_alive import keep_model_alive
from deployments.ingress.serving.speech import output_format, synthesis_params
from deployments.ingress.serving.speech_stream import SpeechStream, encoder_step, pcm_headers
from deployments.ingress.state import IngressState
from deployments.protocol.errors import invalid_request
from deployments.protocol.speech import CaptionedSpeechRequest, SpokenWord

NDJSON_MEDIA_TYPE = "application/x-ndjson"


class ServingCaptionedSpeech:
    def __init__(self, state: IngressState):
        self.state = state

    async def speak(self, request: CaptionedSpeechRequest, model: Optional[str]) -> Response:
        if request.stream_format is not None:
            raise invalid_request(
                "captioned speech streams JSON lines (stream: true) or answers one JSON object; "
                "stream_format is for /v1/audio/speech",
                "stream_format",
            )
        fmt = output_format(None, request.response_format, None)
        params = synthesis_params(request, word_timings=request.return_timestamps)
        speech = await SpeechStream.open(self.state, params, model)
        await keep_model_alive(self.state, "tts", model, request.keep_alive)
        if request.stream:
            response = StreamingResponse(_lines(_streamed(speech, fmt)), media_type=NDJSON_MEDIA_TYPE)
        else:
            response = JSONResponse(await _whole(speech, fmt))
        response.headers.update(pcm_headers(speech.sample_rate))
        return response


def caption(audio: bytes, fmt: str, words: list[SpokenWord]) -> dict:
    """One answer object, in Kokoro-FastAPI's field names."""
    return {
        "audio": base64.b64encode(audio).decode("ascii"),
        "audio_format": MEDIA_TYPES[fmt],
        "timestamps": [{"word": w.word, "start_time": w.start, "end_time": w.end} for w in words],
    }


async def _whole(speech: SpeechStream, fmt: str) -> dict:
    parts: list[np.ndarray] = []
    words: list[SpokenWord] = []
    async for samples, chunk_words in speech.spoken():
        parts.append(samples)
        words += chunk_words
    audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    data = await asyncio.to_thread(encode, audio, speech.sample_rate, fmt)  # a codec: off the event loop
    return caption(data, fmt, words)


async def _streamed(speech: SpeechStream, fmt: str) -> AsyncIterator[dict]:
    """A line per chunk that has bytes to send; words whose audio has no bytes out yet (an
    encoder holding them back, flac's whole file) wait for the next line that has."""
    waiting: list[SpokenWord] = []
    with StreamEncoder(fmt, speech.sample_rate) as encoder:  # stopped if the listener leaves
        async for samples, words in speech.spoken():
            waiting += words
            if data := await encoder_step(encoder, encoder.feed, samples):
                yield caption(data, fmt, waiting)
                waiting = []
        tail = await encoder_step(encoder, encoder.finish)
        if tail or waiting:
            yield caption(tail, fmt, waiting)


async def _lines(objects: AsyncIterator[dict]) -> AsyncIterator[bytes]:
    """JSON lines; a failure after the status was sent is the last line, an error object."""
    try:
        async for obj in objects:
            yield json.dumps(obj, separators=(",", ":")).encode() + b"\n"
    except Exception as e:
        yield json.dumps(from_exception(e).body()).encode() + b"\n"
