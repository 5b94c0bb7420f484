"""Configuration of the LLM slot (the `llm:` block of the graph args)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deployments.llm.smollm2 import SMOLLM2_ID
from deployments.llm.tiny_model import TINY_LLM_ID
from deployments.slot_types import SLOT_DEFAULT, SlotModelsConfig

# OminiX-API's LLM families (its README's `"model": "qwen3"`): names for whatever the slot serves.
OMINIX_FAMILIES = ("qwen3", "mistral", "glm")


class SpeculativeConfig(BaseModel):
    """Speculative decoding (vLLM's `speculative_config` names): each sequence drafts a few
    tokens cheaply, the model checks them in one step of the running batch
    (deployments/llm/speculation.py). Greedy answers are unchanged; sampled ones keep the
    model's distribution."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["ngram", "draft"] = Field(
        "ngram",
        description="ngram: prompt lookup, the tokens that followed the latest earlier occurrence of the "
        "sequence's last tokens in its own context (edits, echoed JSON, quotes); draft: a small model with "
        "the same tokenizer (draft_model) guesses, batched beside the served model",
    )
    draft_model: Optional[str] = Field(
        None, description="method draft: the draft model (built-in id, local directory or Hugging Face repo id)"
    )
    num_speculative_tokens: int = Field(4, ge=1, le=16, description="Tokens drafted per step, at most")
    prompt_lookup_min: int = Field(2, ge=1, description="ngram: the shortest suffix matched")
    prompt_lookup_max: int = Field(4, ge=1, description="ngram: the longest suffix matched (tried first)")
    disable_by_batch_size: Optional[int] = Field(
        None,
        ge=2,
        description="Drafting pauses while the running batch holds this many sequences or more (vLLM's name): "
        "a large batch's step is compute-bound, where each drafted position costs what a token costs "
        "(on this project's CPU bench, ngram drafts sped one stream's edits 1.55x and slowed 16 streams to 0.63x; "
        "docs/performance.md). None: always draft",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError("speculative.prompt_lookup_min must not exceed prompt_lookup_max")
        if (self.method == "draft") != bool(self.draft_model):
            raise ValueError("speculative.draft_model is needed by method draft, and only by it")
        return self

    def settings(self, draft_dir: Optional[Path] = None):
        """The engine's settings; `draft_dir`: the draft model's directory, resolved by the replica."""
        from deployments.llm.drafts import SpeculativeSettings

        return SpeculativeSettings(
            self.method,
            self.num_speculative_tokens,
            self.prompt_lookup_min,
            self.prompt_lookup_max,
            str(draft_dir) if draft_dir else None,
            self.disable_by_batch_size,
        )


class AdapterConfig(BaseModel):
    """A LoRA adapter's long form in `llm.adapters` (vLLM's --lora-modules JSON form)."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(..., min_length=1, description="A local directory or Hugging Face repo id (mlx-lm's files)")
    base: Optional[str] = Field(None, description="The allowed model it runs on; unset: the slot's default_model")


class LLMSlotConfig(SlotModelsConfig):
    default_model: str = Field(SMOLLM2_ID, description="Served when a request names no model; loaded at start-up")
    aliases: dict[str, str] = Field(
        default_factory=lambda: dict.fromkeys(OMINIX_FAMILIES, SLOT_DEFAULT),
        description="Other names requests may use as `model` (OminiX-API's qwen3, mistral, glm) -> an allowed id or `default`",
    )
    # The random-weight tiny model stays servable by name: tests that need a code path, not
    # an answer, run it ~40x faster.
    models: list[str] = Field(
        default_factory=lambda: [TINY_LLM_ID],
        description="Other model ids requests may name (the allow-list)",
    )
    max_models_per_replica: int = Field(
        2, ge=1, description="Models one replica keeps loaded at once (the least recently used is evicted)"
    )
    adapters: dict[str, str | AdapterConfig] = Field(
        default_factory=dict,
        description="LoRA adapters served as models, by name: {name: path} (a directory of mlx_lm.lora's "
        "adapter_config.json and adapters.safetensors, or a Hugging Face repo id), or {name: {path, base}}; "
        "more are loaded at run time with POST /v1/load_lora_adapter",
    )
    max_adapters_per_replica: int = Field(
        8, ge=1, description="LoRA adapters one replica keeps loaded at once (the least recently used is evicted)"
    )
    max_lora_rank: int = Field(64, ge=1, description="The highest LoRA rank served; an adapter above it is a 400")
    max_batch_size: int = Field(32, ge=1, description="Sequences decoded together per replica")
    prefill_batch_size: int = Field(8, ge=1, description="Prompts prefilled together per step")
    prefill_step_size: Optional[int] = Field(
        None,
        ge=16,
        description="Prompt tokens processed per prefill step; unset: 512 on MLX's CPU backend, 2048 on Metal (measured)",
    )
    batching: bool = Field(True, description="False: one sequence at a time (a baseline)")
    default_max_tokens: int = Field(
        2048, ge=1, description="Tokens a chat completion generates when it sets no max_tokens (text completions: 16)"
    )
    max_n: int = Field(
        8, ge=1, description="Choices one request may ask for (`n`); more is a 400. The n share one prefill and batch"
    )
    schema_attempts: int = Field(
        4,
        ge=1,
        description="Attempts a structured answer gets to validate against its JSON Schema as sent (what the "
        "grammar cannot enforce, uniqueItems, if/then/else..., is checked on the finished answer); a failed one is "
        "generated again with another seed, and a choice that never passes ends with finish_reason schema_not_met",
    )
    prefix_cache_entries: int = Field(
        10, ge=0, description="Prompt KV caches kept for reuse by later prompts with the same start; 0: off"
    )
    prefix_cache_bytes: int = Field(2 << 30, ge=0, description="Memory the prefix cache and the running batch may hold")
    disk_cache_bytes: int = Field(
        4 << 30,
        ge=0,
        description="Disk the prompt cache's second tier may use under <cache_dir>/prompt-cache, shared by the "
        "node's LLM replicas and kept across restarts (least recently used evicted); 0: off",
    )
    disk_cache_min_tokens: int = Field(
        256,
        ge=1,
        description="Prompt caches of at least this many tokens go to the disk tier once seen a second time (reused or kept again)",
    )
    cpu_dtype: Literal["auto", "float32", "keep"] = Field(
        "auto",
        description="On MLX's CPU backend: auto makes bf16/fp16/quantized weights dense float32 when the copy fits "
        "cpu_upcast_max_bytes (BLAS-fast there); float32 always; keep never. A GPU (Metal, CUDA) keeps the weights as they are",
    )
    cpu_upcast_max_bytes: int = Field(
        4 << 30, ge=0, description="The largest dense float32 copy cpu_dtype auto makes of one model's weights"
    )

    speculative: Optional[SpeculativeConfig] = Field(
        None,
        description="Speculative decoding inside the continuous batch (off when unset): "
        "{method: ngram | draft, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, draft_model}",
    )

    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description="Ranks each replica's model is split over, a slice of every layer each (mlx-lm's model.shard); "
        "above 1 a replica is a gang of that many processes (docs/multi-node.md)",
    )
    pipeline_parallel_size: int = Field(
        1, ge=1, description="Ranks each replica's model is split over, some of its layers each (mlx-lm's pipeline)"
    )
    distributed_backend: Literal["ring", "jaccl", "mpi"] = Field(
        "ring",
        description="MLX's backend between a gang's ranks: ring (TCP, its hostfile built at start), jaccl "
        "(Thunderbolt 5 RDMA between Macs), mpi",
    )
    placement_strategy: Literal["STRICT_SPREAD", "SPREAD", "PACK", "STRICT_PACK"] = Field(
        "STRICT_SPREAD",
        description="Where a gang's ranks go: STRICT_SPREAD gives each a machine's memory of its own; PACK or "
        "STRICT_PACK puts them on one (tests on one machine)",
    )
    rank_resources: dict[str, float] = Field(
        default_factory=lambda: {"CPU": 0.1, "memory": float(1 << 30)},
        description="What each of a gang's other ranks reserves (Ray resources; `memory` in bytes: its shard's size)",
    )
    rank_label_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Ray node labels every rank of a gang, the replica's too, must match (docs/multi-node.md)",
    )
    rank_timeout_s: float = Field(
        120.0,
        gt=0,
        description="A gang's round (one step of every rank) taking longer than this means a rank is gone: the "
        "replica turns unhealthy and Serve replaces the whole gang; at start, a rank that has not begun by then, "
        "or ranks that have not formed their group this long after all began joining, fail the replica",
    )

    @model_validator(mode="after")
    def _one_model_per_gang(self) -> LLMSlotConfig:
        # A process joins one MLX group, whose ranks hold one model's shards.
        if self.gang().sharded:
            self.max_models_per_replica = 1
        return self

    def gang(self):
        from deployments.llm.gang import GangSpec

        return GangSpec(self.tensor_parallel_size, self.pipeline_parallel_size, self.distributed_backend)

    def placement_options(self, replica_resources: dict) -> dict:
        """A gang replica is a placement group: the replica (rank 0) in the first bundle, each
        other rank in one of its own (Ray Serve LLM's layout for vLLM on NVIDIA)."""
        size = self.gang().size
        if size == 1:
            return {}
        first = {"CPU": replica_resources.get("num_cpus", 0), "memory": replica_resources.get("memory", 0)}
        bundles = [{k: v for k, v in first.items() if v}] + [dict(self.rank_resources)] * (size - 1)
        options = {"placement_group_bundles": bundles, "placement_group_strategy": self.placement_strategy}
        if self.rank_label_selector:
            options["placement_group_bundle_label_selector"] = [dict(self.rank_label_selector)]
        return options

    @model_validator(mode="after")
    def _adapters_are_not_models(self) -> LLMSlotConfig:
        allowed = self.allowed_models()
        for name, spec in self.adapters.items():
            if not name or name in allowed or name.lower() in {a.lower() for a in self.aliases}:
                raise ValueError(f"llm.adapters: '{name}' is a model id or alias already; name the adapter otherwise")
            base = spec.base if isinstance(spec, AdapterConfig) else None
            if base is not None and base not in allowed:
                raise ValueError(f"llm.adapters.{name}.base: '{base}' is not an allowed model of the slot")
        return self

    def adapter_specs(self) -> dict[str, dict]:
        """The configured adapters in Control's and the replica's form: {name: {path, base}}."""
        return {
            name: {"path": spec, "base": None} if isinstance(spec, str) else spec.model_dump()
            for name, spec in self.adapters.items()
        }

    def max_ongoing_requests(self) -> int:
        return self.max_batch_size  # Serve sends work to batch, never to queue inside a replica

    def engine_config(self, disk_cache_dir: Path | None = None, draft_dir: Path | None = None):
        """The engine's settings; the disk tier only with a directory (the replica's cache dir);
        `draft_dir`: speculative decoding's draft model, resolved."""
        from deployments.llm.engine import EngineConfig  # MLX: only where an engine starts

        return EngineConfig(
            max_batch_size=self.max_batch_size,
            prefill_batch_size=self.prefill_batch_size,
            prefill_step_size=self.prefill_step_size,
            batching=self.batching,
            default_max_tokens=self.default_max_tokens,
            prefix_cache_entries=self.prefix_cache_entries,
            prefix_cache_bytes=self.prefix_cache_bytes,
            cpu_dtype=self.cpu_dtype,
            cpu_upcast_max_bytes=self.cpu_upcast_max_bytes,
            max_n=self.max_n,
            disk_cache_dir=str(disk_cache_dir) if disk_cache_dir else None,
            disk_cache_bytes=self.disk_cache_bytes,
            disk_cache_min_tokens=self.disk_cache_min_tokens,
            speculative=self.speculative.settings(draft_dir) if self.speculative else None,
        )

    def catalog_entry(self, cache_dir: Path) -> dict:
        # The ingress refuses n over the limit before the slot sees the request, and resamples a
        # structured answer that fails its schema (deployments/ingress/serving/structured.py).
        options = {"max_n": self.max_n, "schema_attempts": self.schema_attempts}
        # Each adapter with the model it runs on (its parent in /v1/models).
        adapters = {name: spec["base"] or self.default_model for name, spec in self.adapter_specs().items()}
        return {**super().catalog_entry(cache_dir), "options": options, "adapters": adapters}
