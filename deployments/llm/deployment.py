"""The LLM slot as a Ray Serve deployment: a thin adapter from Serve to `LLMEngine`.

Each replica holds up to `max_models_per_replica` engines, chosen per request through Serve
model multiplexing (the ingress sets `multiplexed_model_id`), so requests for one model are
routed to replicas that already hold it. The default model is loaded before the replica
reports ready (deployments/slot_replica.py). A conversation's requests go to the replica holding
its prefix cache (deployments/routing/router.py, docs/routing.md).

LoRA adapters are models too: a request naming one carries the adapter's name as its multiplexed
model id, so Serve prefers the replicas that hold it; the replica loads the model it runs on,
then the adapter into that model's engine (up to `max_adapters_per_replica`, least recently used
evicted), and its sequence decodes in the same batch as every other adapter's and the base
model's (deployments/llm/adapters.py, lora.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Optional

from ray import serve
from ray.serve.config import RequestRouterConfig

from deployments.control.residency import ADAPTER, MODEL
from deployments.generation.sampling import SamplingParams
from deployments.hub import resolve_model_dir
from deployments.llm.adapter_files import ADAPTER_FILES, AdapterError, AdapterLayout, load_layout
from deployments.llm.adapters import AdapterSpec, AdapterSpecs, HeldAdapter
from deployments.llm.constraints import checked_constraint
from deployments.llm.disk_cache import PROMPT_CACHE_DIR, clear_all
from deployments.llm.engine import LLMEngine
from deployments.llm.metrics import GenerationMetrics
from deployments.llm.prompts import Prompt, chat_prompt, completion_prompt
from deployments.llm.ranks import Gang
from deployments.llm.slot import SLOT
from deployments.protocol.errors import APIError, invalid_request, unavailable
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
        self.adapter_specs = AdapterSpecs(self.config.adapter_specs())

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

    # ------------------------------------------------------------------ LoRA adapters

    def adapter_limit(self) -> int:
        return self.config.max_adapters_per_replica

    def describe_resident(self, model_id: str) -> tuple[str, Optional[str]]:
        spec = self.adapter_specs.get(model_id)
        return (MODEL, None) if spec is None else (ADAPTER, self._base_of(spec))

    def _base_of(self, spec: AdapterSpec) -> str:
        # Configured without a base: the configured default (not whatever is the default now,
        # which an operator may change to a model the adapter does not fit).
        return spec.base or self.config.default_model

    async def load_resident(self, model_id: str):
        """An adapter's load into the engine of its model (which `_serving` loaded first), else
        a model's engine."""
        spec = self.adapter_specs.get(model_id)
        if spec is None:
            return await self._load_engine(model_id)
        base = self._base_of(spec)
        engine = self.models.holding(base)
        if engine is None or engine.closed:
            raise unavailable(f"Adapter '{model_id}' runs on {base}, which this replica does not hold now; retry")
        layout = await asyncio.to_thread(self._adapter_layout, spec, engine)
        ref = await engine.add_adapter(layout)
        self.metrics.add(base, "adapter_loads")
        return HeldAdapter(engine, ref, base)

    def _adapter_layout(self, spec: AdapterSpec, engine: LLMEngine, param: str = "model") -> AdapterLayout:
        """The adapter's files found, read and checked to fit the engine's model (a 400 naming
        the adapter when they do not)."""
        if not engine.serves_adapters:
            raise invalid_request(
                f"Adapter '{spec.name}': LoRA adapters are not served on a sharded LLM replica "
                "(llm.tensor_parallel_size, pipeline_parallel_size): its ranks hold shards of the model",
                param,
                "adapters_unsupported",
            )
        try:
            return load_layout(
                spec.name,
                spec.path,
                self._adapter_repo,
                engine.linear_layers,
                engine.model_id,
                self.config.max_lora_rank,
            )
        except AdapterError as e:
            raise invalid_request(str(e), param, "invalid_adapter") from None

    def _adapter_repo(self, repo: str) -> Path:
        return resolve_model_dir(repo, builtins={}, cache_dir=self.cache_dir, allow_patterns=list(ADAPTER_FILES))

    def resident_evicted(self, model_id: str, kind: str, parent: Optional[str]) -> None:
        if kind == ADAPTER and parent is not None:
            self.metrics.add(parent, "adapter_evictions")

    async def adapters_changed(self, adapters: dict[str, dict]) -> None:
        """Control's run-time adapters: one unloaded (or loaded again from other files) leaves
        this replica now; its running requests finish on it."""
        for name in self.adapter_specs.replace_runtime(adapters):
            await self.models.evict(name)

    async def check_adapter(self, name: str, path: str, base: str) -> dict:
        """POST /v1/load_lora_adapter's check, on one replica: the adapter's files found and
        checked to fit `base` (loaded here if it is not); a 400 naming the adapter if not."""
        engine = await self.models.use(base)
        layout = await asyncio.to_thread(self._adapter_layout, AdapterSpec(name, path, base), engine, "lora_path")
        return {"name": name, "base": base, "kind": layout.kind, "rank": layout.rank, "modules": len(layout.modules)}

    async def _serving(self) -> tuple[LLMEngine, Optional[HeldAdapter]]:
        """The engine for the current request and, when it names an adapter, the adapter (its
        model loaded first: the adapter is loaded into that model's engine)."""
        name = serve.get_multiplexed_model_id()
        spec = self.adapter_specs.get(name) if name else None
        if spec is None:
            return await self.engine(), None
        base = self._base_of(spec)
        try:
            engine = await self.models.use(base)
            adapter = await self.models.use(name)
            if adapter.engine is not engine:  # its model was reloaded since: load it again there
                await self.models.evict(name)
                adapter = await self.models.use(name)
        except APIError:
            raise
        except Exception as e:
            raise unavailable(f"Adapter '{name}' could not be loaded: {e}") from None
        return engine, adapter

    # ------------------------------------------------------------------ generation

    async def chat(self, request: ChatCompletionRequest) -> AsyncIterator[GenerationChunk]:
        engine, adapter = await self._serving()
        prompt = await asyncio.to_thread(chat_prompt, engine.tokenizer, request)
        async for chunk in self._generate(engine, prompt, request, request.template_tools(), adapter):
            yield chunk

    async def count_tokens(self, request: ChatCompletionRequest) -> int:
        """The prompt tokens a chat request would take: its messages and tools through the
        model's chat template (Anthropic's /v1/messages/count_tokens)."""
        engine, _ = await self._serving()
        prompt = await asyncio.to_thread(chat_prompt, engine.tokenizer, request)
        return len(prompt.token_ids)

    async def completions(self, request: CompletionRequest) -> AsyncIterator[GenerationChunk]:
        engine, adapter = await self._serving()
        prompt = await asyncio.to_thread(completion_prompt, engine.tokenizer, request)
        async for chunk in self._generate(engine, prompt, request, None, adapter):
            yield chunk

    async def _generate(
        self, engine, prompt: Prompt, request, tools, adapter: Optional[HeldAdapter] = None
    ) -> AsyncIterator[GenerationChunk]:
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
        # The model that answers, as responses echo it and the metrics count it: the adapter.
        served = adapter.model_id if adapter is not None else engine.model_id
        first_token_at = None
        ref = adapter.ref if adapter is not None else None
        async for chunk in engine.generate(prompt, params, tools, n, request.logprob_count(), guided, ref):
            now = time.perf_counter()
            if first_token_at is None:
                first_token_at = now
                chunk.model, chunk.sampling = served, params.used()
                chunk.prompt_tokens = len(prompt.token_ids)
                self.metrics.first_token(served, now - start)
            if chunk.usage is not None:
                details = chunk.usage.prompt_tokens_details
                self.metrics.finished(
                    served,
                    chunk.usage.prompt_tokens,
                    chunk.usage.completion_tokens,
                    now - first_token_at,
                    details.cached_tokens if details else 0,
                )
            yield chunk

    def sample_gauges(self) -> None:
        held: dict[str, int] = {}
        for adapter in self.models.adapters():
            held[adapter.base] = held.get(adapter.base, 0) + 1
        self.metrics.adapters(held)
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
        """Per loaded model on this replica: the engine's sequence counts, tokens, latencies;
        per adapter it holds: its requests, tokens, latencies (the metrics under its name)."""
        out = {e.model_id: {**e.stats, **self.metrics.summary(e.model_id)} for e in self.models.engines()}
        for adapter in self.models.adapters():
            out[adapter.model_id] = {"adapter_of": adapter.base, **self.metrics.summary(adapter.model_id)}
        return out
