"""POST /v1/audio/transcriptions on the ASR slot, in the three forms clients send:

- multipart form (OpenAI): `file`, `model`, `language`, `prompt`, `response_format`,
  `temperature`, `timestamp_granularities[]`;
- the raw audio as the body (MiniInfer), parameters in the query string;
- JSON (OminiX-API): `{"file": "<base64>" | "/server/path", "model", "language", ...}`.

The router only parses; decoding, size limits and transcription happen in the ASR slot, and
the transcript is rendered here in the requested response format.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from deployments.asr.formats import render
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.b64 import decode_base64_field
from deployments.protocol.errors import invalid_request
from deployments.protocol.transcription import TranscriptionParams

router = APIRouter(tags=["audio"])

_PARAM_NAMES = ("model", "language", "prompt", "response_format", "temperature")
_GRANULARITIES = ("timestamp_granularities[]", "timestamp_granularities")


@router.post("/v1/audio/transcriptions")
async def create_transcription(request: Request, state: IngressState = Depends(ingress_state)):
    return await transcribe(request, state)


async def transcribe(request: Request, state: IngressState, family: Optional[str] = None):
    """A transcription in any of the three forms; `family` (OminiX-API's /v1/audio/asr/<family>
    routes) picks a model of that family instead of the request's `model`."""
    asr = state.slot("asr")
    family_model = state.catalog.family("asr", family) if family else None
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    server_path: Optional[str] = None
    if media_type == "multipart/form-data":
        params, audio = await _from_form(request)
    elif media_type == "application/json":
        params, audio, server_path = await _from_json(request)
    else:
        params, audio = _from_query(request), await request.body()
        if not audio:
            raise invalid_request(
                "The request has no audio: send a multipart form with `file`, "
                "a JSON body with `file` (base64), or the audio bytes as the body.",
                "file",
            )
    model = family_model or state.catalog.resolve("asr", params.model)
    transcript = await asr.call("transcribe", params, audio, server_path, model=model)
    body, content_type = render(transcript, params.response_format, include_words=params.word_timestamps)
    if isinstance(body, dict):
        return JSONResponse(body)
    return Response(content=body, media_type=content_type)


def _validated(fields: dict[str, Any]) -> TranscriptionParams:
    try:
        return TranscriptionParams.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as e:
        first = e.errors()[0]
        param = ".".join(str(p) for p in first.get("loc", ())) or None
        raise invalid_request(f"{param}: {first.get('msg', 'invalid value')}", param) from None


async def _from_form(request: Request) -> tuple[TranscriptionParams, bytes]:
    async with request.form() as form:  # closing it removes any spooled upload
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise invalid_request("The form has no `file` part with the audio.", "file")
        fields: dict[str, Any] = {k: form.get(k) for k in _PARAM_NAMES}
        granularities = [g for name in _GRANULARITIES for g in form.getlist(name)]
        if granularities:
            fields["timestamp_granularities"] = granularities
        params = _validated(fields)
        return params, await upload.read()


def _from_query(request: Request) -> TranscriptionParams:
    query = request.query_params
    fields: dict[str, Any] = {k: query.get(k) for k in _PARAM_NAMES}
    granularities = [g for name in _GRANULARITIES for g in query.getlist(name)]
    if granularities:
        fields["timestamp_granularities"] = granularities
    return _validated(fields)


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
    params = _validated(body)
    if file.startswith("/"):  # OminiX-API: a path on the server (restricted in the ASR slot)
        return params, None, file
    return params, _base64_audio(file), None


def _base64_audio(text: str) -> bytes:
    try:
        return decode_base64_field(text)
    except ValueError:
        raise invalid_request("`file` is neither valid base64 audio nor an absolute server path.", "file") from None
