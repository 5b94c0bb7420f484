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

    @field_validator("language", "prompt", "model")
    @classmethod
    def _blank_is_none(cls, value: Optional[str]) -> Optional[str]:
        value = value.strip() if isinstance(value, str) else value
        return value or None

    @property
    def word_timestamps(self) -> bool:
        return "word" in self.timestamp_granularities
