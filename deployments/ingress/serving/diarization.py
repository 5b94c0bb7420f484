"""Diarization on the ASR slot (POST /v1/audio/diarization): who spoke when in an upload,
answered as JSON or RTTM. The ASR slot diarizes (deployments/asr/deployment.py); the known
speakers' clips are decoded here, so a bad one is a 400 before the slot is called.
"""

from __future__ import annotations

from pathlib import PurePath

from fastapi.responses import JSONResponse, Response

from deployments.diarization.formats import CONTENT_TYPES, diarization_json, rttm
from deployments.ingress.audio_params import known_speakers
from deployments.ingress.state import IngressState
from deployments.protocol.transcription import DiarizationParams


class ServingDiarization:
    """The ASR slot is looked up first: a graph without it answers `slot_disabled` before the
    body is read."""

    def __init__(self, state: IngressState):
        self.asr = state.slot("asr")

    async def create(self, params: DiarizationParams, audio: bytes, name: str) -> Response:
        """`name`: the upload's file name, whose stem names the recording in RTTM."""
        references = await known_speakers(params)
        params = params.model_copy(update={"known_speaker_references": []})
        diarization = await self.asr.call("diarize", params, audio, references)
        if params.response_format == "rttm":
            return Response(rttm(diarization, PurePath(name).stem), media_type=CONTENT_TYPES["rttm"])
        return JSONResponse(diarization_json(diarization))
