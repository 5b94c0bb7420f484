"""OminiX-API's voice training routes: POST /v1/voices/train (JSON with base64 audio, or a
multipart upload), GET /v1/voices/train/status, GET /v1/voices/train/progress (SSE),
POST /v1/voices/train/cancel. The jobs are VoiceTraining's (ingress/serving/training.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Literal, Optional

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field, field_validator

from deployments.ingress.errors import validate_body
from deployments.ingress.responses import sse_response
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.b64 import decode_base64_field
from deployments.protocol.errors import invalid_request
from deployments.voices.jobs import VOICE_NAME

router = APIRouter(tags=["voices"])


class TrainRequest(BaseModel):
    voice_name: str
    audio: str = Field(..., description="base64 audio (JSON); the uploaded file (multipart)")
    transcript: Optional[str] = None
    # Kokoro: the number of fitting steps; pocket_tts: one conditioning whatever the tier.
    quality: Literal["fast", "standard", "high"] = "standard"
    language: Optional[str] = None
    denoise: bool = False
    # Kokoro only (extensions of OminiX-API's request): the steps instead of `quality`'s, and
    # the stock voices the fitted style may blend (default: all). Fewer voices score faster: the
    # first job scores every candidate once (docs/api/speech.md, "Kokoro: style fitting").
    steps: Optional[int] = Field(None, ge=1, le=200)
    base_voices: Optional[list[str]] = Field(None, min_length=1)

    @field_validator("base_voices", mode="before")
    @classmethod
    def _voices(cls, value):
        if isinstance(value, str):  # a multipart form field: comma-separated names
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("voice_name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not VOICE_NAME.match(value):
            raise ValueError("must be 1-64 characters of A-Z, a-z, 0-9, '_' and '-'")
        return value


@router.post("/v1/voices/train")
async def train_voice(request: Request, state: IngressState = Depends(ingress_state)):
    body, audio = await _parse(request)
    job = await state.voice_training().start(
        state,
        body.voice_name,
        audio,
        body.transcript,
        body.language,
        body.quality,
        body.denoise,
        steps=body.steps,
        base_voices=body.base_voices,
    )
    return {"task_id": job.task_id, "status": "accepted", "message": f"Training of voice '{body.voice_name}' started"}


async def _parse(request: Request) -> tuple[TrainRequest, bytes]:
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        async with request.form() as form:
            upload = form.get("audio") or form.get("file")
            if upload is None or isinstance(upload, str):
                raise invalid_request("The form has no `audio` file part", "audio")
            audio = await upload.read()
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
        return validate_body(TrainRequest, {**fields, "audio": "-"}), audio
    try:
        raw = json.loads(await request.body(), strict=False)
    except (ValueError, RecursionError) as e:
        raise invalid_request(f"Invalid JSON body: {e}") from None
    body = validate_body(TrainRequest, raw)
    try:
        audio = decode_base64_field(body.audio)
    except ValueError:
        raise invalid_request("`audio` is not valid base64", "audio", "invalid_audio") from None
    if not audio:
        raise invalid_request("`audio` is empty", "audio", "invalid_audio")
    return body, audio


@router.get("/v1/voices/train/status")
async def training_status(task_id: str = Query(...), state: IngressState = Depends(ingress_state)):
    return (await state.voice_training().job(task_id)).status_body()


@router.get("/v1/voices/train/progress")
async def training_progress(task_id: str = Query(...), state: IngressState = Depends(ingress_state)):
    events = state.voice_training().watch(task_id)
    first = await anext(events)  # an unknown task is a 404 before the stream opens

    async def all_events() -> AsyncIterator[dict | None]:
        yield first
        async for event in events:
            yield event

    return sse_response(all_events(), end=b"")


@router.post("/v1/voices/train/cancel")
async def cancel_training(task_id: str = Query(...), state: IngressState = Depends(ingress_state)):
    return await state.voice_training().cancel(task_id)
