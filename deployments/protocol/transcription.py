"""The parameters of POST /v1/audio/transcriptions, whichever form carried them (multipart
form, query string with a raw audio body, or a JSON body). Ray-free and MLX-free."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

ResponseFormat = Literal["json", "text", "verbose_json", "srt", "vtt"]
Granularity = Literal["segment", "word"]


class TranscriptionParams(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients send extras (stream, chunking_strategy, ...)

    model: Optional[str] = None
    language: Optional[str] = Field(None, max_length=32)
    prompt: Optional[str] = Field(None, max_length=4096)
    response_format: ResponseFormat = "json"
    temperature: float = Field(0.0, ge=0.0, le=1.0)
    timestamp_granularities: list[Granularity] = Field(default_factory=lambda: ["segment"])
    stream: bool = False  # SSE transcript.text.delta / transcript.text.done events
    task: Literal["transcribe", "translate"] = "transcribe"  # set by the route, never by the client

    @field_validator("language", "prompt", "model")
    @classmethod
    def _blank_is_none(cls, value: Optional[str]) -> Optional[str]:
        value = value.strip() if isinstance(value, str) else value
        return value or None

    @field_validator("stream")
    @classmethod
    def _stream_formats(cls, value: bool, info) -> bool:
        if value and info.data.get("response_format") not in ("json", "text"):
            raise ValueError("stream=true sends transcript.text events; response_format must be json or text")
        return value

    @property
    def word_timestamps(self) -> bool:
        return "word" in self.timestamp_granularities


class TranscriptionWord(BaseModel):
    word: str
    start: float
    end: float
    probability: Optional[float] = None


class TranscriptionSegment(BaseModel):
    """OpenAI's verbose_json segment (the fields whisper clients read)."""

    id: int
    seek: int = 0
    start: float
    end: float
    text: str
    tokens: list[int] = []
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0


class Transcription(BaseModel):
    """response_format "json"."""

    text: str


class VerboseTranscription(BaseModel):
    """response_format "verbose_json"; `words` only with timestamp_granularities[]=word."""

    task: str = "transcribe"
    language: Optional[str]
    duration: float
    text: str
    segments: list[TranscriptionSegment]
    words: Optional[list[TranscriptionWord]] = None
