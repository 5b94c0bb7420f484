"""POST /v1/audio/speech (JSON) and POST /v1/audio/speech/clone (multipart) on the TTS slot.

Output: `?format=` (OminiX-API) wins over `response_format`, which defaults to WAV (see README).
pcm and wav stream as the audio is generated; mp3/flac/opus/aac are encoded when it ends.
`stream: true` answers MiniInfer's SSE, `stream_format: "sse"` OpenAI's; both carry base64 PCM.
"""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from fastapi.responses import Response

from deployments.audio.encode import UnsupportedFormat, check_format
from deployments.audio.reference import MAX_REFERENCE_BYTES, BadReferenceAudio, decode_base64
from deployments.ingress.speech import SpeechStream, audio_response, miniinfer_sse, openai_sse
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import invalid_request
from deployments.protocol.speech import DEFAULT_RESPONSE_FORMAT, SpeechRequest, SynthesisParams

router = APIRouter(tags=["audio"])


@router.post("/v1/audio/speech")
async def create_speech(
    request: SpeechRequest,
    format: Optional[str] = Query(None, description="OminiX-API: ?format=wav overrides response_format"),
    state: IngressState = Depends(ingress_state),
) -> Response:
    model = state.catalog.resolve("tts", request.model)
    sse = "openai" if request.stream_format == "sse" else "miniinfer" if request.stream else None
    fmt = _output_format(format, request.response_format, sse)
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


@router.post("/v1/audio/speech/clone")
async def clone_speech(
    input: str = Form(...),
    reference_audio: UploadFile = File(..., description="The voice to clone (wav, flac, ogg, mp3)"),
    reference_text: Optional[str] = Form(None),
    model: Optional[str] = Form(None),
    response_format: Optional[str] = Form(None),
    speed: float = Form(1.0, ge=0.25, le=4.0),
    language: Optional[str] = Form(None),
    instruct: Optional[str] = Form(None),
    prompt: Optional[str] = Form(None),
    format: Optional[str] = Query(None),
    state: IngressState = Depends(ingress_state),
) -> Response:
    """OminiX-API's multipart clone route: the same synthesis with a per-request reference."""
    resolved = state.catalog.resolve("tts", model)
    fmt = _output_format(format, response_format, None)
    audio = await reference_audio.read(MAX_REFERENCE_BYTES + 1)
    if not audio:
        raise invalid_request("reference_audio is empty", "reference_audio", "invalid_reference_audio")
    params = SynthesisParams(
        text=input,
        speed=speed,
        language=language or None,
        instruct=(instruct or prompt or "").strip() or None,
        reference_audio=audio,
        reference_text=reference_text or None,
    )
    speech = await SpeechStream.open(state, params, resolved)
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
