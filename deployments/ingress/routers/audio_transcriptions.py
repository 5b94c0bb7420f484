"""POST /v1/audio/transcriptions on the ASR slot, in the three forms clients send:

- multipart form (OpenAI): `file`, `model`, `language`, `prompt`, `response_format`,
  `temperature`, `timestamp_granularities[]`, and for speakers `known_speaker_names[]`,
  `known_speaker_references[]` (with `response_format=diarized_json`) or `diarize`;
- the raw audio as the body (MiniInfer), parameters in the query string (`?diarize=1`);
- JSON (OminiX-API): `{"file": "<base64>" | "/server/path", "model", "language", ...}`.

`stream=true` (in any of the three) answers OpenAI's SSE events instead: a
`transcript.text.delta` per decoded window, then `transcript.text.done` with the usage; with
`response_format=diarized_json`, the labelled `transcript.text.segment` events come between.
POST /v1/audio/translations takes the same forms (multilingual Whisper only).

The router only parses; `ServingTranscription` (ingress/serving/transcription.py) calls the ASR
slot and renders the transcript in the requested response format.
"""

from __future__ import annotations

import json
from typing import Optional

from fastapi import APIRouter, Depends, Request

from deployments.ingress.audio_params import (
    SPEAKER_FIELDS,
    SPEAKER_LISTS,
    audio_body_doc,
    collect,
    data_url_bytes,
    form_fields_schema,
    validated,
)
from deployments.ingress.serving.transcription import ServingTranscription
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import APIError, invalid_request
from deployments.protocol.transcription import TranscriptionParams

router = APIRouter(tags=["audio"])

_PARAM_NAMES = (
    "model",
    "keep_alive",
    "language",
    "prompt",
    "response_format",
    "temperature",
    "stream",
    "diarize",
    "chunking_strategy",
    *SPEAKER_FIELDS,
)
_SERVED_LISTS = ("timestamp_granularities", *SPEAKER_LISTS)
_LIST_NAMES = (*_SERVED_LISTS, "include", "keywords", "languages")  # the last two: read to be refused

# What /docs and generated clients see: the three forms, with the fields the route serves.
TRANSCRIPTION_BODY_DOC = audio_body_doc(
    form_fields_schema(TranscriptionParams, _PARAM_NAMES, _SERVED_LISTS),
    "A multipart form (OpenAI) with the audio as `file`; or the audio bytes as the body with the "
    "same parameters in the query string (MiniInfer: `?diarize=1`); or JSON (OminiX-API) with "
    "`file` as base64 or a server path.",
    json_fields=form_fields_schema(TranscriptionParams, _PARAM_NAMES + _SERVED_LISTS, ()),
)


@router.post("/v1/audio/transcriptions", openapi_extra=TRANSCRIPTION_BODY_DOC)
async def create_transcription(request: Request, state: IngressState = Depends(ingress_state)):
    return await transcribe(request, state)


@router.post("/v1/audio/translations", openapi_extra=TRANSCRIPTION_BODY_DOC)
async def create_translation(request: Request, state: IngressState = Depends(ingress_state)):
    """OpenAI's translations (speech in any language -> English text): multilingual Whisper only."""
    return await transcribe(request, state, task="translate")


async def transcribe(request: Request, state: IngressState, family: Optional[str] = None, task: str = "transcribe"):
    """A transcription in any of the three forms; `family` (OminiX-API's /v1/audio/asr/<family>
    routes) picks a model of that family instead of the request's `model`."""
    serving = ServingTranscription(state)
    family_model = state.catalog.family("asr", family) if family else None
    params, audio, server_path = await _parse(request)
    params.check_diarization()
    params.check_logprobs()
    return await serving.create(params.model_copy(update={"task": task}), audio, server_path, family_model)


async def _parse(request: Request) -> tuple[TranscriptionParams, Optional[bytes], Optional[str]]:
    """The parameters, and the audio or (JSON only) a server file path, from any of the three forms."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == "multipart/form-data":
        return (*await _from_form(request), None)
    if media_type == "application/json":
        return await _from_json(request)
    params, audio = _from_query(request), await request.body()
    if not audio:
        raise invalid_request(
            "The request has no audio: send a multipart form with `file`, "
            "a JSON body with `file` (base64), or the audio bytes as the body.",
            "file",
        )
    return params, audio, None


async def _from_form(request: Request) -> tuple[TranscriptionParams, bytes]:
    async with request.form() as form:  # closing it removes any spooled upload
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise invalid_request("The form has no `file` part with the audio.", "file")
        params = validated(TranscriptionParams, collect(form, _PARAM_NAMES, _LIST_NAMES))
        return params, await upload.read()


def _from_query(request: Request) -> TranscriptionParams:
    return validated(TranscriptionParams, collect(request.query_params, _PARAM_NAMES, _LIST_NAMES))


async def _from_json(request: Request) -> tuple[TranscriptionParams, Optional[bytes], Optional[str]]:
    try:
        body = json.loads(await request.body(), strict=False)  # as LenientJSONRoute (ingress/requests.py)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise invalid_request(f"Invalid JSON body: {e}") from None
    if not isinstance(body, dict):
        raise invalid_request("The JSON body must be an object.")
    file = body.pop("file", None)
    if not isinstance(file, str) or not file:
        raise invalid_request("`file` is required: base64-encoded audio or a server file path.", "file")
    params = validated(TranscriptionParams, body)
    if file.startswith("/"):  # OminiX-API: a path on the server (restricted in the ASR slot)
        return params, None, file
    return params, _base64_audio(file), None


def _base64_audio(text: str) -> bytes:
    try:
        return data_url_bytes(text, "file")
    except APIError:
        raise invalid_request("`file` is neither valid base64 audio nor an absolute server path.", "file") from None
