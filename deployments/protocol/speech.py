"""Speech (TTS) request models: POST /v1/audio/speech and what the ingress sends the TTS slot.

No Ray, no MLX.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from deployments.protocol.keep_alive import KEEP_ALIVE_FIELD, KeepAlive

ResponseFormat = Literal["pcm", "wav", "mp3", "flac", "opus", "aac"]
DEFAULT_RESPONSE_FORMAT: ResponseFormat = "wav"


class SpeechRequest(BaseModel):
    """OpenAI's speech request plus OminiX-API's and MiniInfer's extensions."""

    # strict: the JSON types /openapi.json publishes, as RequestModel (deployments/protocol/openai.py)
    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)

    input: str
    model: Optional[str] = None
    keep_alive: Optional[KeepAlive] = KEEP_ALIVE_FIELD
    voice: Optional[str] = None
    response_format: Optional[ResponseFormat] = None
    speed: float = Field(1.0, ge=0.25, le=4.0)
    language: Optional[str] = None
    # OminiX-API: `instruct` (alias `prompt`); OpenAI: `instructions`.
    instruct: Optional[str] = Field(None, validation_alias=AliasChoices("instruct", "prompt", "instructions"))
    reference_audio: Optional[str] = Field(None, description="base64 audio to clone the voice from")
    reference_text: Optional[str] = None
    stream: bool = Field(False, description='MiniInfer SSE: data: {"delta": <base64 pcm>}')
    stream_format: Optional[Literal["audio", "sse"]] = None

    @field_validator("voice", mode="before")
    @classmethod
    def _voice_by_id(cls, v):
        # OpenAI's custom-voice form, {"id": "..."}: the id names a voice here as a string does.
        return v["id"] if isinstance(v, dict) and isinstance(v.get("id"), str) else v

    @field_validator("instruct", "language", "voice", "reference_text")
    @classmethod
    def _blank_is_none(cls, v: Optional[str]) -> Optional[str]:
        return v if v is None or v.strip() else None


class CaptionedSpeechRequest(SpeechRequest):
    """Kokoro-FastAPI's captioned speech: the speech request, answered as JSON with the audio
    (base64) and each word's start and end; `stream` (its default) sends one JSON line a chunk."""

    language: Optional[str] = Field(None, validation_alias=AliasChoices("language", "lang_code"))
    stream: bool = Field(True, description="one JSON object per line as the audio is made")
    return_timestamps: bool = True


class SynthesisParams(BaseModel):
    """One synthesis as the TTS slot receives it (HTTP and WebSocket alike)."""

    text: str
    voice: Optional[str] = None
    speed: float = 1.0
    language: Optional[str] = None
    instruct: Optional[str] = None
    reference_audio: Optional[bytes] = None  # encoded audio (wav, flac, ...)
    reference_text: Optional[str] = None
    word_timings: bool = False  # each chunk says which words it speaks, and when (Kokoro, English)


class SpokenWord(BaseModel):
    """A word of the input and when it is spoken, in seconds from the synthesis's start."""

    word: str
    start: float
    end: float


class SpeechChunk(BaseModel):
    """Audio the TTS slot streams back: float32 mono samples, little-endian bytes, and with
    `word_timings` the words whose timings are known once this chunk is made."""

    sample_rate: int
    samples: bytes = b""  # float32 LE; empty for the opening chunk
    words: list[SpokenWord] = []

    def to_array(self):
        import numpy as np

        return np.frombuffer(self.samples, dtype="<f4")
