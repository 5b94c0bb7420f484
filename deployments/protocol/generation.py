"""What an LLM slot streams back to the ingress: text deltas already split into answer,
reasoning and tool calls, and on the last chunk the finish reason and token usage."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel

from deployments.protocol.openai import FinishReason, ToolCall, UsageInfo


class GenerationChunk(BaseModel):
    model: Optional[str] = None  # set on the first chunk: the model that answers
    content: str = ""
    reasoning_content: str = ""
    tool_calls: list[ToolCall] = []
    finish_reason: FinishReason = None
    usage: Optional[UsageInfo] = None

    def merge(self, other: GenerationChunk) -> GenerationChunk:
        """Coalesce two consecutive chunks (used to batch deltas under load)."""
        return GenerationChunk(
            model=self.model or other.model,
            content=self.content + other.content,
            reasoning_content=self.reasoning_content + other.reasoning_content,
            tool_calls=self.tool_calls + other.tool_calls,
            finish_reason=other.finish_reason or self.finish_reason,
            usage=other.usage or self.usage,
        )

    def is_empty(self) -> bool:
        return not (self.content or self.reasoning_content or self.tool_calls or self.finish_reason)
