"""POST /v1/audio/speech (JSON) and POST /v1/audio/speech/clone (multipart) on the TTS slot.

Output: `?format=` (OminiX-API) wins over `response_format`, which defaults to WAV (see README).
pcm and wav stream as the audio is generated; mp3/flac/opus/aac are encoded when it ends.
`stream: true` answers MiniInfer's SSE, `stream_format: "sse"` OpenAI's; both carry base64 PCM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from fastapi.responses import Response

from deployments.audio.encode import UnsupportedFormat, check_format
from deployments.audio.reference import MAX_REFERENCE_BYTES, BadReferenceAudio, decode_base64
from deployments.ingress.requests import LenientJSONRoute
from deployments.ingress.speech import SpeechStream, audio_response, miniinfer_sse, openai_sse
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import invalid_request
from deployments.protocol.speech import DEFAULT_RESPONSE_FORMAT, SpeechRequest, SynthesisParams

router = APIRouter(tags=["audio"], route_class=LenientJSONRoute)


@dataclass
class CloneForm:
    """OminiX-API's multipart clone request."""

    input: str
    reference_audio: UploadFile
    reference_text: Optional[str]
    model: Optional[str]
    response_format: Optional[str]
    speed: float
    language: Optional[str]
    instruct: Optional[str]

    @classmethod
    def from_form(
        cls,
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
        instruct = (instruct or prompt or "").strip() or None
        return cls(input, reference_audio, reference_text, model, response_format, speed, language, instruct)


@router.post("/v1/audio/speech")
async def create_speech(
    request: SpeechRequest,
    format: Optional[str] = Query(None, description="OminiX-API: ?format=wav overrides response_format"),
    state: IngressState = Depends(ingress_state),
) -> Response:
    return await speak(state, request, format, state.catalog.resolve("tts", request.model))


@router.post("/v1/audio/speech/clone")
async def clone_speech(
    form: CloneForm = Depends(CloneForm.from_form),
    format: Optional[str] = Query(None),
    state: IngressState = Depends(ingress_state),
) -> Response:
    """OminiX-API's multipart clone route: the same synthesis with a per-request reference."""
    return await clone(state, form, format, state.catalog.resolve("tts", form.model))


async def speak(state: IngressState, request: SpeechRequest, query_format: Optional[str], model: Optional[str]):
    """A JSON speech request on `model` (None: the TTS slot's default)."""
    sse = "openai" if request.stream_format == "sse" else "miniinfer" if request.stream else None
    fmt = _output_format(query_format, request.response_format, sse)
    reference = None
    if request.reference_audio is not None:
        try:
            reference = decode_base64(request.reference_audio)
        except BadReferenceAudio as e:
            raise invalid_request(str(e), "reference_audio", "invalid_reference_audio") from None
    params = SynthesisParams(
        text=request.input,
        voice=request.voice,
        speed=request.speed,
        language=request.language,
        instruct=request.instruct,
        reference_audio=reference,
        reference_text=request.reference_text,
    )
    speech = await SpeechStream.open(state, params, model)
    if sse == "openai":
        return openai_sse(speech)
    if sse == "miniinfer":
        return miniinfer_sse(speech)
    return await audio_response(speech, fmt)


async def clone(state: IngressState, form: CloneForm, query_format: Optional[str], model: Optional[str]):
    fmt = _output_format(query_format, form.response_format, None)
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
    speech = await SpeechStream.open(state, params, model)
    return await audio_response(speech, fmt)


def _output_format(query: Optional[str], requested: Optional[str], sse: Optional[str]) -> str:
    """The response format, checked before any synthesis starts."""
    if sse is not None:
        # Both SSE flavours carry raw PCM; another container inside base64 deltas is not offered.
        if (query or requested or "pcm") != "pcm":
            raise invalid_request(
                "SSE speech streams carry base64 PCM (s16le mono); use response_format 'pcm' or omit it",
                "response_format",
            )
        return "pcm"
    fmt = (query or requested or DEFAULT_RESPONSE_FORMAT).lower()
    try:
        check_format(fmt)
    except UnsupportedFormat as e:
        raise invalid_request(str(e), "format" if query else "response_format", "unsupported_format") from None
    return fmt
