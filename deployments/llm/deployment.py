"""The LLM slot as a Ray Serve deployment: a thin adapter from Serve to `LLMEngine`.

Each replica holds up to `max_models_per_replica` engines, chosen per request through Serve
model multiplexing (the ingress sets `multiplexed_model_id`), so requests for one model are
routed to replicas that already hold it. The default model is loaded before the replica
reports ready (deployments/slot_replica.py). A conversation's requests go to the replica holding
its prefix cache (deployments/routing/router.py, docs/routing.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

from ray import serve
from ray.serve.config import RequestRouterConfig

from deployments.generation.sampling import SamplingParams
from deployments.llm.constraints import checked_constraint
from deployments.llm.disk_cache import PROMPT_CACHE_DIR, clear_all
from deployments.llm.engine import LLMEngine
from deployments.llm.metrics import GenerationMetrics
from deployments.llm.prompts import Prompt, chat_prompt, completion_prompt
from deployments.llm.ranks import Gang
from deployments.llm.slot import SLOT
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import ChatCompletionRequest, CompletionRequest
from deployments.slot_replica import SlotReplica

LLM_ROUTER = RequestRouterConfig(request_router_class="deployments.routing.router.AffinityRouter")


@serve.deployment(request_router_config=LLM_ROUTER)
class LLMSlot(SlotReplica):
    slot = SLOT
    # What mlx-lm needs from a Hugging Face repo (the same patterns mlx_lm.load downloads).
    file_patterns = [
        "*.json",
        "model*.safetensors",
        "*.py",
        "tokenizer.model",
        "*.tiktoken",
        "*.txt",
        "*.jsonl",
        "*.jinja",
    ]
    metrics_class = GenerationMetrics

    async def setup(self) -> None:
        # A sharded model: this replica is rank 0 of a gang whose other ranks it starts in its
        # placement group (deployments/llm/ranks.py).
        spec = self.config.gang()
        self.gang = (
            Gang(spec, self.config.model_dump(), self.cache_dir, self.config.rank_timeout_s) if spec.sharded else None
        )

    async def start_engine(self, model_id: str, model_dir: Path) -> LLMEngine:
        # The node's replicas share the cache dir, so they share the prompt cache's disk tier.
        speculative = self.config.speculative
        draft = speculative.draft_model if speculative else None
        draft_dir = await asyncio.to_thread(self.model_dir, draft) if draft else None
        config = self.config.engine_config(disk_cache_dir=self.cache_dir / PROMPT_CACHE_DIR, draft_dir=draft_dir)
        if self.gang is not None:
            return await self.gang.start_engine(model_id, model_dir, config)
        return await LLMEngine.start(model_id, model_dir, config)

    def ranks(self) -> list[dict] | None:
        return self.gang.describe() if self.gang is not None else None

    def check_gang(self) -> None:
        if self.gang is not None:
            self.gang.check()

    async def chat(self, request: ChatCompletionRequest) -> AsyncIterator[GenerationChunk]:
        engine = await self.engine()
        prompt = await asyncio.to_thread(chat_prompt, engine.tokenizer, request)
        async for chunk in self._generate(engine, prompt, request, request.template_tools()):
            yield chunk

    async def count_tokens(self, request: ChatCompletionRequest) -> int:
        """The prompt tokens a chat request would take: its messages and tools through the
        model's chat template (Anthropic's /v1/messages/count_tokens)."""
        engine = await self.engine()
        prompt = await asyncio.to_thread(chat_prompt, engine.tokenizer, request)
        return len(prompt.token_ids)

    async def completions(self, request: CompletionRequest) -> AsyncIterator[GenerationChunk]:
        engine = await self.engine()
        prompt = await asyncio.to_thread(completion_prompt, engine.tokenizer, request)
        async for chunk in self._generate(engine, prompt, request, None):
            yield chunk

    async def _generate(self, engine, prompt: Prompt, request, tools) -> AsyncIterator[GenerationChunk]:
        start = time.perf_counter()
        max_tokens = engine.resolve_max_tokens(
            len(prompt.token_ids), request.token_budget(), request.default_max_tokens
        )
        params = SamplingParams.from_request(request, max_tokens, engine.generation_defaults)
        n = request.choice_count()
        engine.check_params(params, n)
        # The ingress checked the schemas already; a request that reaches a replica another way
        # is refused here the same, before it joins the batch.
        constraint = await asyncio.to_thread(checked_constraint, request)
        guided = await engine.guide(constraint, prompt, n)
        first_token_at = None
        async for chunk in engine.generate(prompt, params, tools, n, request.logprob_count(), guided):
            now = time.perf_counter()
            if first_token_at is None:
                first_token_at = now
                chunk.model, chunk.sampling = engine.model_id, params.used()
                chunk.prompt_tokens = len(prompt.token_ids)
                self.metrics.first_token(engine.model_id, now - start)
            if chunk.usage is not None:
                details = chunk.usage.prompt_tokens_details
                self.metrics.finished(
                    engine.model_id,
                    chunk.usage.prompt_tokens,
                    chunk.usage.completion_tokens,
                    now - first_token_at,
                    details.cached_tokens if details else 0,
                )
            yield chunk

    def sample_gauges(self) -> None:
        engines = self.models.engines()
        self.metrics.sequences({e.model_id: e.sequence_counts() for e in engines})
        totals = {e.model_id: e.batch_totals() for e in engines}
        self.metrics.speculation({m: (t.drafted_tokens, t.accepted_tokens) for m, t in totals.items()})

    def engine_summary(self, engine: LLMEngine) -> dict:
        """The engine's counters and its prompt cache per tier (GET /metrics)."""
        return {**super().engine_summary(engine), "prompt_cache": engine.prompt_cache_tiers()}

    async def clear_prompt_cache(self) -> dict:
        """Empty the prompt cache's disk tier on this replica's node, every model's: the
        entries and bytes removed (POST /v1/models/cache/clear)."""
        removed = await asyncio.to_thread(clear_all, self.cache_dir / PROMPT_CACHE_DIR)
        return {"replica": serve.get_replica_context().replica_id.unique_id, **removed}

    def stats(self) -> dict:
        """Per loaded model on this replica: the engine's sequence counts, tokens, latencies."""
        return {e.model_id: {**e.stats, **self.metrics.summary(e.model_id)} for e in self.models.engines()}
