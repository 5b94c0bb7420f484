"""POST /v1/agent/stream's request (MiniInfer's voice agent): one user turn, answered as
sentences of text and their speech. No Ray, no MLX."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pydantic import ConfigDict, Field, field_validator

from deployments.protocol.openai import ChatMessage, RequestModel
from deployments.protocol.speech import SynthesisParams


@dataclass(frozen=True)
class Speech:
    """How an answer is spoken: the TTS model (None: the slot's default), voice, speed, language."""

    tts_model: Optional[str] = None
    voice: Optional[str] = None
    speed: float = 1.0
    language: Optional[str] = None

    def synthesis(self, text: str) -> SynthesisParams:
        return SynthesisParams(text=text, voice=self.voice, speed=self.speed, language=self.language)


class AgentRequest(RequestModel):
    model_config = ConfigDict(extra="ignore")

    input: str = Field(..., description="What the user says (this turn)")
    voice: Optional[str] = Field(None, description="A TTS voice; the TTS model's default when omitted")
    system: Optional[str] = Field(None, description="A system prompt, before the earlier turns")
    messages: list[ChatMessage] = Field([], description="Earlier turns of the conversation (OpenAI messages)")
    model: Optional[str] = Field(None, description="The LLM; the LLM slot's default when omitted")
    tts_model: Optional[str] = Field(None, description="The TTS model; the TTS slot's default when omitted")
    max_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    speed: float = Field(1.0, ge=0.25, le=4.0)
    language: Optional[str] = None

    @field_validator("input")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("input must not be empty")
        return v

    @field_validator("voice", "system", "language")
    @classmethod
    def _blank_is_none(cls, v: Optional[str]) -> Optional[str]:
        return v if v is None or v.strip() else None

    def chat_body(self) -> dict[str, Any]:
        """The LLM's streamed chat request (a body for ChatCompletionRequest): system, earlier
        turns, this input."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        turns = [m.model_dump(exclude_none=True) for m in self.messages]
        body = {"model": self.model, "max_tokens": self.max_tokens, "temperature": self.temperature}
        return {**body, "messages": [*system, *turns, {"role": "user", "content": self.input}], "stream": True}

    def speech(self) -> Speech:
        return Speech(self.tts_model, self.voice, self.speed, self.language)
