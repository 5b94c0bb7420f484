"""POST /v1/audio/diarization (speaches' route): who spoke when in an upload, without a
transcript. A multipart form (`file`, `response_format` json | rttm, `num_speakers` or
`min_speakers`/`max_speakers`, `known_speaker_names[]` + `known_speaker_references[]`) or the
raw audio as the body with the same parameters in the query string. The router parses;
`ServingDiarization` (ingress/serving/diarization.py) calls the ASR slot and renders the answer.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from deployments.diarization.config import SPEAKER_MODEL_ID
from deployments.ingress.audio_params import (
    SPEAKER_FIELDS,
    SPEAKER_LISTS,
    audio_body_doc,
    collect,
    form_fields_schema,
    validated,
)
from deployments.ingress.serving.diarization import ServingDiarization
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import invalid_request
from deployments.protocol.transcription import DiarizationParams

router = APIRouter(tags=["audio"])

_PARAM_NAMES = ("model", "response_format", *SPEAKER_FIELDS)

DIARIZATION_BODY_DOC = audio_body_doc(
    form_fields_schema(DiarizationParams, _PARAM_NAMES, SPEAKER_LISTS),
    "A multipart form with the audio as `file`, or the audio bytes as the body with the same "
    "parameters in the query string.",
)


@router.post("/v1/audio/diarization", openapi_extra=DIARIZATION_BODY_DOC)
async def create_diarization(request: Request, state: IngressState = Depends(ingress_state)):
    serving = ServingDiarization(state)
    params, audio, name = await _parse(request)
    if params.model not in (None, SPEAKER_MODEL_ID):
        raise invalid_request(
            f"Diarization runs the speaker model '{SPEAKER_MODEL_ID}'; model '{params.model}' is not one.", "model"
        )
    params.check_speakers()
    return await serving.create(params, audio, name)


async def _parse(request: Request) -> tuple[DiarizationParams, bytes, str]:
    """The parameters, the audio and its file name, from a multipart form or the body and query."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == "multipart/form-data":
        async with request.form() as form:
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise invalid_request("The form has no `file` part with the audio.", "file")
            params = validated(DiarizationParams, collect(form, _PARAM_NAMES, SPEAKER_LISTS))
            audio, name = await upload.read(), upload.filename or "audio"
    else:
        params = validated(DiarizationParams, collect(request.query_params, _PARAM_NAMES, SPEAKER_LISTS))
        audio, name = await request.body(), "audio"
    if not audio:
        raise invalid_request(
            "The request has no audio: send a multipart form with `file` or the bytes as the body.", "file"
        )
    return params, audio, name
