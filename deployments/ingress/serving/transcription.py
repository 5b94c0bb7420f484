"""Transcriptions and translations on the ASR slot (POST /v1/audio/transcriptions,
/v1/audio/translations, OminiX-API's /v1/audio/asr/<family>): the parsed request goes to the
slot, and the transcript comes back in the requested response format, or as OpenAI's SSE
events with `stream=true`.

Decoding the upload, size limits, transcription and diarization happen in the ASR slot; the
known speakers' short reference clips are decoded here, so a bad one is a 400 before the slot
is called.
"""

from __future__ import annotations

from typing import Optional

from fastapi.responses import JSONResponse, Response

from deployments.asr.formats import render
from deployments.ingress.audio_params import known_speakers
from deployments.ingress.responses import sse_response
from deployments.ingress.serving.keep_alive import keep_model_alive
from deployments.ingress.state import IngressState
from deployments.protocol.transcription import TranscriptionParams


class ServingTranscription:
    """The ASR slot is looked up first: a graph without it answers `slot_disabled` before the
    body is read."""

    def __init__(self, state: IngressState):
        self.state = state
        self.asr = state.slot("asr")

    async def create(
        self,
        params: TranscriptionParams,
        audio: Optional[bytes],
        server_path: Optional[str],
        family_model: Optional[str] = None,
    ) -> Response:
        """`audio` or `server_path` (OminiX-API's file on the server); `family_model` (the
        per-family routes) instead of the request's `model`."""
        model = family_model or self.state.catalog.resolve("asr", params.model)
        speakers: tuple = ()  # diarized: the known speakers' decoded clips, by name
        if params.diarized:
            speakers = (await known_speakers(params),)
            params = params.model_copy(update={"known_speaker_references": []})  # decoded: sent once, as samples
        if params.stream:
            events = await self.asr.stream("transcribe_stream", params, audio, server_path, *speakers, model=model)
            await keep_model_alive(self.state, "asr", model, params.keep_alive)
            return sse_response(events.chunks(), end=b"")  # OpenAI ends this stream without [DONE]
        transcript = await self.asr.call("transcribe", params, audio, server_path, *speakers, model=model)
        await keep_model_alive(self.state, "asr", model, params.keep_alive)
        body, content_type = render(
            transcript, params.response_format, include_words=params.word_timestamps, include_logprobs=params.logprobs
        )
        if isinstance(body, dict):
            return JSONResponse(body)
        return Response(content=body, media_type=content_type)
