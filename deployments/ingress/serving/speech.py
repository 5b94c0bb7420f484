"""The TTS slot's HTTP speech (POST /v1/audio/speech, /v1/audio/speech/clone and OminiX-API's
per-family TTS routes): `ServingSpeech` turns a parsed request into a synthesis and answers it
as audio bytes or SSE events.

Output: `?format=` (OminiX-API) wins over `response_format`, which defaults to WAV (see README).
pcm, wav, mp3, aac and opus stream as the audio is generated; flac is encoded when it ends.
`stream: true` answers MiniInfer's SSE (base64 PCM), `stream_format: "sse"` OpenAI's (base64 audio in
the response format, PCM by default).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Optional

from fastapi.responses import Response, StreamingResponse

from deployments.audio.encode import MEDIA_TYPES, StreamEncoder, UnsupportedFormat, check_format
from deployments.audio.reference import MAX_REFERENCE_BYTES, BadReferenceAudio, decode_base64
from deployments.ingress.errors import from_exception
from deployments.ingress.responses import sse_response
from deployments.ingress.serving.keep_alive import keep_model_alive
from deployments.ingress.serving.speech_stream import SpeechStream, encoder_step, pcm_headers
from deployments.ingress.state import IngressState
from deployments.protocol.errors import invalid_request
from deployments.protocol.speech import DEFAULT_RESPONSE_FORMAT, SpeechRequest, SynthesisParams

logger = logging.getLogger("ray.serve")


@dataclass
class CloneForm:
    """OminiX-API's multipart clone request, as the router reads it from the form."""

    input: str
    reference_audio: Any  # the uploaded file (an UploadFile: `await read(n)`)
    reference_text: Optional[str]
    model: Optional[str]
    response_format: Optional[str]
    speed: float
    language: Optional[str]
    instruct: Optional[str]


class ServingSpeech:
    """Speech on the TTS slot; `model` None is the slot's default."""

    def __init__(self, state: IngressState):
        self.state = state

    async def speak(self, request: SpeechRequest, query_format: Optional[str], model: Optional[str]) -> Response:
        """A JSON speech request."""
        sse = "openai" if request.stream_format == "sse" else "miniinfer" if request.stream else None
        fmt = output_format(query_format, request.response_format, sse)
        speech = await SpeechStream.open(self.state, synthesis_params(request), model)
        await keep_model_alive(self.state, "tts", model, request.keep_alive)
        if sse == "openai":
            return openai_sse(speech, fmt)
        if sse == "miniinfer":
            return miniinfer_sse(speech)
        return await audio_response(speech, fmt)

    async def clone(self, form: CloneForm, query_format: Optional[str], model: Optional[str]) -> Response:
        """The same synthesis with the form's reference recording."""
        fmt = output_format(query_format, form.response_format, None)
        audio = await form.reference_audio.read(MAX_REFERENCE_BYTES + 1)
        if not audio:
            raise invalid_request("reference_audio is empty", "reference_audio", "invalid_reference_audio")
        params = SynthesisParams(
            text=form.input,
            speed=form.speed,
            language=form.language or None,
            instruct=form.instruct,
            reference_audio=audio,
            reference_text=form.reference_text or None,
        )
        speech = await SpeechStream.open(self.state, params, model)
        return await audio_response(speech, fmt)


def synthesis_params(request: SpeechRequest, **options: Any) -> SynthesisParams:
    """What a JSON speech request asks the TTS slot to speak (`options`: a route's own)."""
    return SynthesisParams(
        text=request.input,
        voice=request.voice,
        speed=request.speed,
        language=request.language,
        instruct=request.instruct,
        reference_audio=reference_audio(request.reference_audio),
        reference_text=request.reference_text,
        **options,
    )


def reference_audio(encoded: Optional[str]) -> Optional[bytes]:
    """A JSON request's base64 reference recording, decoded (a bad one is a 400)."""
    if encoded is None:
        return None
    try:
        return decode_base64(encoded)
    except BadReferenceAudio as e:
        raise invalid_request(str(e), "reference_audio", "invalid_reference_audio") from None


def output_format(query: Optional[str], requested: Optional[str], sse: Optional[str]) -> str:
    """The response format, checked before any synthesis starts. OpenAI's SSE carries any format
    (PCM unless one is named); MiniInfer's carries PCM only."""
    if sse == "miniinfer":
        if (query or requested or "pcm") != "pcm":
            raise invalid_request(
                "MiniInfer's SSE speech stream (stream: true) carries base64 PCM (s16le mono); use "
                "response_format 'pcm' or omit it, or stream_format 'sse' for OpenAI's events in any format",
                "response_format",
            )
        return "pcm"
    fmt = (query or requested or ("pcm" if sse else DEFAULT_RESPONSE_FORMAT)).lower()
    try:
        check_format(fmt)
    except UnsupportedFormat as e:
        raise invalid_request(str(e), "format" if query else "response_format", "unsupported_format") from None
    return fmt


async def audio_response(speech: SpeechStream, fmt: str) -> Response:
    """The audio as bytes in `fmt`: streamed chunk by chunk for pcm, wav, mp3, aac and opus (at
    an Opus rate), the whole file for flac."""
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
        with encoder:  # stopped if the listener leaves mid-stream
            try:
                async for samples in speech.audio():
                    yield await encoder_step(encoder, encoder.feed, samples)
            except Exception as e:  # the status is sent: the stream just ends (logged)
                logger.warning("Speech stream failed after its headers were sent: %s", from_exception(e).message)
            if tail := await encoder_step(encoder, encoder.finish):
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


def openai_sse(speech: SpeechStream, fmt: str = "pcm") -> StreamingResponse:
    """OpenAI `stream_format: "sse"`: `speech.audio.delta` events with base64 audio in `fmt` (the
    stream `audio_response` would send, cut where the audio was made), then one
    `speech.audio.done` (no [DONE] line: OpenAI's speech stream has none)."""

    async def events() -> AsyncIterator[dict]:
        samples = 0
        with StreamEncoder(fmt, speech.sample_rate) as encoder:  # stopped if the listener leaves
            async for chunk in speech.audio():
                samples += chunk.size
                if data := await encoder_step(encoder, encoder.feed, chunk):
                    yield {"type": "speech.audio.delta", "audio": _b64(data)}
            if tail := await encoder_step(encoder, encoder.finish):
                yield {"type": "speech.audio.delta", "audio": _b64(tail)}
        # Token counts do not exist for this model family: reported as 0, with the real duration.
        usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
        yield {"type": "speech.audio.done", "usage": usage, "audio_seconds": samples / speech.sample_rate}

    response = sse_response(events(), end=b"")
    response.headers.update(pcm_headers(speech.sample_rate))
    return response
