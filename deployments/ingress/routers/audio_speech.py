"""POST /v1/audio/speech (JSON), POST /v1/audio/speech/clone (multipart) and Kokoro-FastAPI's
POST /dev/captioned_speech on the TTS slot.

The routes parse the request and pick the model; `ServingSpeech` (ingress/serving/speech.py)
synthesizes and answers in the requested format (audio bytes, MiniInfer's or OpenAI's SSE),
`ServingCaptionedSpeech` (ingress/serving/captioned_speech.py) with each word's timing.
"""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from fastapi.responses import Response

from deployments.ingress.requests import LenientJSONRoute
from deployments.ingress.serving.captioned_speech import ServingCaptionedSpeech
from deployments.ingress.serving.speech import CloneForm, ServingSpeech
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.speech import CaptionedSpeechRequest, SpeechRequest

router = APIRouter(tags=["audio"], route_class=LenientJSONRoute)


def clone_form(
    input: str = Form(...),
    reference_audio: UploadFile = File(..., description="The voice to clone (wav, flac, ogg, mp3)"),
    reference_text: Optional[str] = Form(None),
    model: Optional[str] = Form(None),
    response_format: Optional[str] = Form(None),
    speed: float = Form(1.0, ge=0.25, le=4.0),
    language: Optional[str] = Form(None),
    instruct: Optional[str] = Form(None),
    prompt: Optional[str] = Form(None),
) -> CloneForm:
    """OminiX-API's multipart clone request (`prompt` is another name for `instruct`)."""
    instruct = (instruct or prompt or "").strip() or None
    return CloneForm(input, reference_audio, reference_text, model, response_format, speed, language, instruct)


@router.post("/v1/audio/speech")
async def create_speech(
    request: SpeechRequest,
    format: Optional[str] = Query(None, description="OminiX-API: ?format=wav overrides response_format"),
    state: IngressState = Depends(ingress_state),
) -> Response:
    model = state.catalog.resolve("tts", request.model)
    return await ServingSpeech(state).speak(request, format, model)


@router.post("/v1/audio/speech/clone")
async def clone_speech(
    form: CloneForm = Depends(clone_form),
    format: Optional[str] = Query(None),
    state: IngressState = Depends(ingress_state),
) -> Response:
    """OminiX-API's multipart clone route: the same synthesis with a per-request reference."""
    return await ServingSpeech(state).clone(form, format, state.catalog.resolve("tts", form.model))


@router.post("/dev/captioned_speech")
async def create_captioned_speech(
    request: CaptionedSpeechRequest, state: IngressState = Depends(ingress_state)
) -> Response:
    """Kokoro-FastAPI's speech with word timestamps: JSON (base64 audio and the words), or JSON
    lines as the audio is made (`stream`, its default)."""
    return await ServingCaptionedSpeech(state).speak(request, state.catalog.resolve("tts", request.model))
