"""GET/POST/DELETE /v1/voices: list the TTS voices, register a cloned voice, remove it; GET
/v1/audio/voices and /v1/audio/models: the voice and model lists TTS clients read (Open WebUI).
The routes parse; `ServingVoices` (ingress/serving/voices.py) calls the TTS slot.
"""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from fastapi.responses import JSONResponse

from deployments.audio.reference import MAX_REFERENCE_BYTES
from deployments.ingress.serving.voices import ServingVoices
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import invalid_request

router = APIRouter(tags=["voices"])


@router.get("/v1/voices")
async def list_voices(state: IngressState = Depends(ingress_state)):
    return await ServingVoices(state).list()


@router.get("/v1/audio/voices")
async def list_voice_choices(
    model: Optional[str] = Query(None, description="the TTS model whose voices to list (default: the slot's)"),
    state: IngressState = Depends(ingress_state),
):
    """`{"voices": [{"id", "name"}]}`, as Open WebUI's OpenAI TTS engine reads it."""
    return await ServingVoices(state).choices(state.catalog.resolve("tts", model))


@router.get("/v1/audio/models")
async def list_speech_models(state: IngressState = Depends(ingress_state)):
    """`{"models": [{"id"}]}`: the TTS slot's models, as Open WebUI's OpenAI TTS engine reads them."""
    return ServingVoices(state).speech_models()


@router.post("/v1/voices")
async def register_voice(
    name: str = Form(...),
    reference_audio: UploadFile = File(..., description="Recording of the voice (wav, flac, ogg, mp3)"),
    reference_text: str = Form("", description="What the recording says (models that use it)"),
    aliases: Optional[list[str]] = Form(None, description="Repeat the field, or comma-separate"),
    language: Optional[str] = Form(None),
    state: IngressState = Depends(ingress_state),
):
    serving = ServingVoices(state)
    audio = await reference_audio.read(MAX_REFERENCE_BYTES + 1)
    if not audio:
        raise invalid_request("reference_audio is empty", "reference_audio", "invalid_reference_audio")
    names = [a.strip() for value in aliases or [] for a in value.split(",") if a.strip()]
    voice = await serving.register(name.strip(), audio, reference_text, names, language or None)
    return JSONResponse(voice, status_code=201)


@router.delete("/v1/voices/{name}")
async def delete_voice(name: str, state: IngressState = Depends(ingress_state)):
    return await ServingVoices(state).delete(name)
