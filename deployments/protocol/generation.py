"""What an LLM slot streams back to the ingress: text deltas already split into answer,
reasoning and tool calls, and on the last chunk the finish reason and token usage.

A request for n choices gets one stream: each chunk names its choice (`index`), each choice's
last chunk carries its finish reason, and the request's very last chunk carries the usage of
all of them. With logprobs asked for, a chunk carries the entries of the tokens it was made
from (`logprobs`; None when they were not asked for).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Optional

from pydantic import BaseModel, Field

from deployments.protocol.logprobs import TokenLogprob
from deployments.protocol.openai import FinishReason, ToolCall, UsageInfo


class SamplingUsed(BaseModel):
    """The sampling settings a generation actually ran with: the request's, else the model's
    generation_config.json defaults, else OpenAI's (what a Responses object echoes)."""

    temperature: float
    top_p: float
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0


class GenerationChunk(BaseModel):
    model: Optional[str] = None  # set on the first chunk: the model that answers
    sampling: Optional[SamplingUsed] = None  # set on the first chunk: the settings it samples with
    prompt_tokens: Optional[int] = None  # set on the LLM slot's first chunk: the prompt's length
    index: int = 0  # the choice this chunk belongs to
    content: str = ""
    reasoning_content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)  # a factory: no deep copy per chunk
    logprobs: Optional[list[TokenLogprob]] = None
    finish_reason: FinishReason = None
    stop_sequence: Optional[str] = None  # the stop string that ended the choice (finish "stop")
    usage: Optional[UsageInfo] = None

    def merge(self, other: GenerationChunk) -> GenerationChunk:
        """Coalesce two consecutive chunks of one choice (used to batch deltas under load)."""
        return GenerationChunk(
            model=self.model or other.model,
            sampling=self.sampling or other.sampling,
            prompt_tokens=self.prompt_tokens if self.prompt_tokens is not None else other.prompt_tokens,
            index=self.index,
            content=self.content + other.content,
            reasoning_content=self.reasoning_content + other.reasoning_content,
            tool_calls=self.tool_calls + other.tool_calls,
            logprobs=_joined(self.logprobs, other.logprobs),
            finish_reason=other.finish_reason or self.finish_reason,
            stop_sequence=other.stop_sequence or self.stop_sequence,
            usage=other.usage or self.usage,
        )

    def is_empty(self) -> bool:
        return not (self.content or self.reasoning_content or self.tool_calls or self.finish_reason)


def _joined(a: Optional[list[TokenLogprob]], b: Optional[list[TokenLogprob]]) -> Optional[list[TokenLogprob]]:
    return None if a is None and b is None else (a or []) + (b or [])


def merge_by_choice(chunks: list[GenerationChunk]) -> list[GenerationChunk]:
    """Consecutive chunks of the same choice coalesced, the order kept (the last chunk, with
    the usage, stays last)."""
    merged: list[GenerationChunk] = []
    for chunk in chunks:
        if merged and merged[-1].index == chunk.index:
            merged[-1] = merged[-1].merge(chunk)
        else:
            merged.append(chunk)
    return merged


async def merged_chunks(
    items: AsyncIterator[GenerationChunk | list[GenerationChunk]],
) -> AsyncIterator[GenerationChunk]:
    """An engine thread's stream merged with `merge_by_choice` (what piled up comes as a list),
    as single chunks; leaving early closes the stream, which stops the generation."""
    async with aclosing(items):
        async for item in items:
            for chunk in item if isinstance(item, list) else [item]:
                yield chunk


def collect_choices(chunks: list[GenerationChunk]) -> tuple[dict[int, GenerationChunk], Optional[UsageInfo]]:
    """A whole stream's chunks as one merged chunk per choice (by index, in index order), and the
    usage (the last one sent)."""
    choices: dict[int, GenerationChunk] = {}
    usage = None
    for chunk in chunks:
        choices[chunk.index] = choices[chunk.index].merge(chunk) if chunk.index in choices else chunk
        usage = chunk.usage or usage
    return dict(sorted(choices.items())), usage
