"""The LLM slot as a Ray Serve deployment: a thin adapter from Serve to `LLMEngine`.

Each replica holds up to `max_models_per_replica` engines, chosen per request through Serve
model multiplexing (the ingress sets `multiplexed_model_id`), so requests for one model are
routed to replicas that already hold it. The default model is loaded before the replica
reports ready.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import AsyncIterator, Optional

from ray import serve

from deployments.control.agent import SlotAgent
from deployments.control.replica_models import ReplicaModels
from deployments.hub import default_cache_dir, resolve_model_dir
from deployments.llm.config import LLMSlotConfig
from deployments.llm.engine import LLMEngine, SamplingParams
from deployments.llm.metrics import GenerationMetrics
from deployments.llm.prompts import Prompt, chat_prompt, completion_prompt
from deployments.llm.smollm2 import SMOLLM2_ID, ensure_smollm2
from deployments.llm.tiny_model import TINY_LLM_ID, ensure_tiny_llm
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import ChatCompletionRequest, CompletionRequest

logger = logging.getLogger("ray.serve")

BUILTIN_LLMS = {SMOLLM2_ID: ensure_smollm2, TINY_LLM_ID: ensure_tiny_llm}
# What mlx-lm needs from a Hugging Face repo (the same patterns mlx_lm.load downloads).
LLM_FILE_PATTERNS = [
    "*.json", "model*.safetensors", "*.py", "tokenizer.model", "*.tiktoken", "*.txt", "*.jsonl", "*.jinja",
]


@serve.deployment(
    name="LLM", max_ongoing_requests=64, health_check_period_s=10, ray_actor_options={"num_cpus": 0.5}
)
class LLMSlot:
    async def __init__(self, config: dict, cache_dir: Optional[str] = None, control=None):
        self.config = LLMSlotConfig.model_validate(config)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.metrics = GenerationMetrics()
        self.models = ReplicaModels("llm", self._load_engine, self.config.max_models_per_replica)
        self.agent = SlotAgent.for_models("llm", control, self.models, self.config.default_model)
        await self.agent.start()  # the slot's current default is loaded before we serve

    async def _load_engine(self, model_id: str) -> LLMEngine:
        model_dir = await asyncio.to_thread(
            resolve_model_dir,
            model_id,
            builtins=BUILTIN_LLMS,
            cache_dir=self.cache_dir,
            allow_patterns=LLM_FILE_PATTERNS,
        )
        engine = await LLMEngine.start(model_id, model_dir, self.config.engine_config())
        if model_id == TINY_LLM_ID:
            logger.warning(
                "LLM slot serves the built-in tiny model '%s': random weights, meaningless "
                "output. Use a real model with e.g. "
                "LLM_MODEL=mlx-community/Qwen3-0.6B-4bit serve run serve_config.yaml",
                model_id,
            )
        return engine

    async def _engine(self) -> LLMEngine:
        return await self.models.for_request(
            self.agent.default_model, self.config.allowed_models(), self.config.models_dir
        )

    async def chat(self, request: ChatCompletionRequest) -> AsyncIterator[GenerationChunk]:
        engine = await self._engine()
        prompt = await asyncio.to_thread(chat_prompt, engine.tokenizer, request)
        async for chunk in self._generate(engine, prompt, request, request.template_tools()):
            yield chunk

    async def completions(self, request: CompletionRequest) -> AsyncIterator[GenerationChunk]:
        engine = await self._engine()
        prompt = await asyncio.to_thread(completion_prompt, engine.tokenizer, request)
        async for chunk in self._generate(engine, prompt, request, None):
            yield chunk

    async def _generate(self, engine, prompt: Prompt, request, tools) -> AsyncIterator[GenerationChunk]:
        start = time.perf_counter()
        max_tokens = engine.resolve_max_tokens(len(prompt.token_ids), request.token_budget())
        params = SamplingParams.from_request(request, max_tokens, engine.generation_defaults)
        engine.check_params(params)
        first_token_at = None
        async for chunk in engine.generate(prompt, params, tools):
            now = time.perf_counter()
            if first_token_at is None:
                first_token_at = now
                chunk.model = engine.model_id
                self.metrics.first_token(engine.model_id, now - start)
            if chunk.usage is not None:
                self.metrics.finished(
                    engine.model_id, chunk.usage.prompt_tokens, chunk.usage.completion_tokens, now - first_token_at
                )
            yield chunk

    def stats(self) -> dict:
        """Per loaded model on this replica: the engine's sequence counts, tokens, latencies."""
        return {e.model_id: {**e.stats, **self.metrics.summary(e.model_id)} for e in self.models.engines()}

    def check_health(self) -> None:
        self.models.check_health()
