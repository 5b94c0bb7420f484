"""The VLM slot as a Ray Serve deployment: a thin adapter from Serve to `VLMEngine`.

The ingress has loaded and checked the request's images (deployments/vlm/images.py); here the
chat messages become the template's messages (image parts stay where they were, as markers),
the sampling options are resolved, and the engine's stream is handed back. Models are
multiplexed per replica as in the other slots.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from ray import serve

from deployments.generation.sampling import SamplingParams
from deployments.protocol.errors import invalid_request
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import ChatCompletionRequest, ChatMessage, ImagePart
from deployments.slot_replica import SlotReplica
from deployments.vlm.engine import VLMEngine
from deployments.vlm.metrics import VLMMetrics
from deployments.vlm.slot import SLOT


def template_message(message: ChatMessage) -> dict[str, Any]:
    """A chat message as mlx-vlm's chat template takes it: text parts and image markers in order."""
    role = "system" if message.role == "developer" else message.role
    if not isinstance(message.content, list):
        return {"role": role, "content": message.text()}
    parts = [
        {"type": "image"} if isinstance(p, ImagePart) else {"type": "text", "text": p.text} for p in message.content
    ]
    return {"role": role, "content": parts}


def sampling(request: ChatCompletionRequest, max_tokens: int) -> SamplingParams:
    """The LLM slot's sampling options (temperature 1.0 unless asked, as OpenAI), less what
    mlx-vlm's generation cannot do here."""
    if request.template_tools():
        raise invalid_request("tools are not supported by the VLM slot", "tools")
    if request.ignore_eos:
        raise invalid_request("ignore_eos is not supported by the VLM slot", "ignore_eos")
    if request.min_tokens:
        raise invalid_request("min_tokens is not supported by the VLM slot", "min_tokens")
    return SamplingParams.from_request(request, max_tokens, {})


@serve.deployment
class VLMSlot(SlotReplica):
    slot = SLOT
    # What mlx-vlm needs from a Hugging Face repo: weights, configs, tokenizer, processor, template.
    file_patterns = ["*.json", "*.safetensors", "*.py", "*.model", "*.tiktoken", "*.txt", "*.jinja"]
    metrics_class = VLMMetrics

    async def start_engine(self, model_id: str, model_dir: Path) -> VLMEngine:
        return await VLMEngine.start(model_id, model_dir)

    async def chat(self, request: ChatCompletionRequest, images: list[bytes]) -> AsyncIterator[GenerationChunk]:
        started = time.perf_counter()
        engine = await self.engine()
        max_tokens = request.token_budget() or self.config.default_max_tokens
        if engine.context_length and max_tokens >= engine.context_length:
            raise invalid_request(
                f"max_tokens {max_tokens} does not fit this model's context of {engine.context_length} tokens",
                "max_tokens",
                "context_length_exceeded",
            )
        params = sampling(request, max_tokens)
        messages = [template_message(m) for m in request.messages]
        first = True
        async for chunk in engine.generate(messages, images, params, request.logprob_count(), request.choice_count()):
            if first:
                chunk.model, chunk.sampling, first = engine.model_id, params.used(), False
            if chunk.usage is not None:
                self.metrics.finished(
                    engine.model_id,
                    len(images),
                    chunk.usage.prompt_tokens,
                    chunk.usage.completion_tokens,
                    time.perf_counter() - started,
                )
            yield chunk

    def stats(self) -> dict:
        return {e.model_id: {**e.stats, **self.metrics.summary(e.model_id)} for e in self.models.engines()}
