"""OminiX-API's per-family audio routes, mapped onto the slots in OminiX-API's request shapes:

- POST /v1/audio/tts/qwen3 (JSON, as /v1/audio/speech) and /v1/audio/tts/clone (multipart, as
  /v1/audio/speech/clone) on the TTS slot's Qwen3-TTS model;
- POST /v1/audio/tts/sovits (JSON; a whole WAV file, as OminiX-API answers it) on a GPT-SoVITS model;
- POST /v1/audio/asr/qwen3 and /v1/audio/asr/paraformer (OminiX-API's JSON form, and the other
  two forms of /v1/audio/transcriptions) on a Qwen3-ASR or Paraformer model.

Each needs a model of its family among the slot's allowed models (its alias's explicit target,
or an id naming the family, e.g. mlx-community/Qwen3-TTS-12Hz-0.6B-Base-bf16): otherwise a 404
`model_not_found`, never the slot's default in its stead (catalog.family). The request's own
`model` is ignored there, as OminiX-API ignores it.
"""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from deployments.ingress.requests import LenientJSONRoute
from deployments.ingress.routers.audio_speech import clone_form
from deployments.ingress.routers.audio_transcriptions import TRANSCRIPTION_BODY_DOC, transcribe
from deployments.ingress.serving.speech import CloneForm, ServingSpeech
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.speech import SpeechRequest

router = APIRouter(tags=["audio"], route_class=LenientJSONRoute)


@router.post("/v1/audio/tts/qwen3")
async def qwen3_speech(
    request: SpeechRequest, format: Optional[str] = Query(None), state: IngressState = Depends(ingress_state)
) -> Response:
    return await ServingSpeech(state).speak(request, format, state.catalog.family("tts", "qwen3-tts"))


@router.post("/v1/audio/tts/clone")
async def qwen3_clone(
    form: CloneForm = Depends(clone_form),
    format: Optional[str] = Query(None),
    state: IngressState = Depends(ingress_state),
) -> Response:
    return await ServingSpeech(state).clone(form, format, state.catalog.family("tts", "qwen3-tts"))


@router.post("/v1/audio/tts/sovits")
async def sovits_speech(request: SpeechRequest, state: IngressState = Depends(ingress_state)) -> Response:
    # OminiX-API's GPT-SoVITS route answers one WAV file whatever the request's format says.
    request = request.model_copy(update={"response_format": "wav", "stream": False, "stream_format": None})
    return await ServingSpeech(state).speak(request, None, state.catalog.family("tts", "gpt-sovits"))


@router.post("/v1/audio/asr/qwen3", openapi_extra=TRANSCRIPTION_BODY_DOC)
async def qwen3_transcription(request: Request, state: IngressState = Depends(ingress_state)):
    return await transcribe(request, state, "qwen3-asr")


@router.post("/v1/audio/asr/paraformer", openapi_extra=TRANSCRIPTION_BODY_DOC)
async def paraformer_transcription(request: Request, state: IngressState = Depends(ingress_state)):
    return await transcribe(request, state, "paraformer")
