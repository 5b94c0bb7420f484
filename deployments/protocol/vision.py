"""OminiX-API's POST /v1/vlm/completions: one base64 image and a prompt in, the answer and real
token counts out. No Ray, no MLX."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, Field, field_validator

from deployments.protocol.keep_alive import KEEP_ALIVE_FIELD, KeepAlive
from deployments.protocol.openai import ChatCompletionRequest, RequestModel, UsageInfo, now


class VLMCompletionRequest(RequestModel):
    model: Optional[str] = Field(None, description="A VLM model id; the VLM slot's default when omitted")
    keep_alive: Optional[KeepAlive] = KEEP_ALIVE_FIELD
    image: str = Field(..., description="The image: base64, or a data:image/...;base64 URL")
    prompt: str = Field(..., min_length=1)
    # OminiX-API answers this route greedily unless asked (a chat completion's default is 1.0).
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: Optional[int] = Field(None, ge=1)

    @field_validator("image")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("image: must not be empty")
        return value.strip()

    def as_chat(self) -> ChatCompletionRequest:
        """The same request as a chat completion with one image part and the prompt after it."""
        url = self.image if self.image.startswith("data:") else f"data:image/png;base64,{self.image}"
        content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": self.prompt}]
        return ChatCompletionRequest(
            model=self.model,
            messages=[{"role": "user", "content": content}],
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )


class VLMCompletionResponse(BaseModel):
    id: str
    object: Literal["vlm.completion"] = "vlm.completion"
    created: int = Field(default_factory=now)
    model: str
    content: str
    usage: UsageInfo
