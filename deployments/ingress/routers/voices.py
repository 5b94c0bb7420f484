"""GET/POST/DELETE /v1/voices: list the TTS voices, register a cloned voice, remove it.

The TTS slot owns the registry file (any replica may serve the call: the file is the source
of truth for all of them).
"""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, File, Form, UploadFile
from fastapi.responses import JSONResponse

from deployments.audio.reference import MAX_REFERENCE_BYTES
from deployments.ingress.errors import from_exception
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import invalid_request, unavailable

router = APIRouter(tags=["voices"])


def _tts(state: IngressState):
    if state.tts is None:
        raise unavailable("The TTS slot is not enabled in this graph")
    return state.tts


async def _call(call) -> JSONResponse:
    try:
        return JSONResponse(await call)
    except Exception as e:
        raise from_exception(e) from None


@router.get("/v1/voices")
async def list_voices(state: IngressState = Depends(ingress_state)):
    return await _call(_tts(state).voices.remote())


@router.post("/v1/voices")
async def register_voice(
    name: str = Form(...),
    reference_audio: UploadFile = File(..., description="Recording of the voice (wav, flac, ogg, mp3)"),
    reference_text: str = Form("", description="What the recording says (models that use it)"),
    aliases: Optional[list[str]] = Form(None, description="Repeat the field, or comma-separate"),
    language: Optional[str] = Form(None),
    state: IngressState = Depends(ingress_state),
):
    audio = await reference_audio.read(MAX_REFERENCE_BYTES + 1)
    if not audio:
        raise invalid_request("reference_audio is empty", "reference_audio", "invalid_reference_audio")
    names = [a.strip() for value in aliases or [] for a in value.split(",") if a.strip()]
    call = _tts(state).register_voice.remote(name.strip(), audio, reference_text, names, language or None)
    response = await _call(call)
    response.status_code = 201
    return response


@router.delete("/v1/voices/{name}")
async def delete_voice(name: str, state: IngressState = Depends(ingress_state)):
    return await _call(_tts(state).delete_voice.remote(name))
